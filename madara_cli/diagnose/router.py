"""MADARA routing: from a model-task pair's diagnostics to one treatment (Section 4.5,
Appendix E's Algorithm 2, and Section 6.2's rule for degenerate scoring):

    if EM_NF < tau_NF:      PDE  (weak baseline: isolate documents)
    elif degenerate:        PDE  (no usable scores: "independently necessitates
                                  per-document isolation", Section 6.2)
    elif rho* > -1.0:       SDA  (stochastic scoring: percentile-rank alignment)
    elif rho_1 < 0.5:       CoT  (weakly coupled: de-polarise with reasoning)
    else:                   ATF  (strongly coupled: filter at mu - 0.5 sigma)

:func:`route` is the ONLY map from diagnostics to a treatment (``madara route``,
``strategy=madara``, the probe, Tables 2, 8, 19, Appendix D and the audit all call it). Beside
it: its baselines (NF-only, Table 19; entropy and binary RSC, Appendix I), Appendix D's sweeps
and madara's isolation policy (:func:`route_isolation`, docs/isolation.md). Strategy names are
the strategy config names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from madara_cli.core import stats
from madara_cli.diagnose import rsc
from madara_cli.results.probe_stats import ProbeStats

PDE, SDA, COT, ATF, THREE_AGENT = "pde", "sda", "cot", "atf", "three_agent"
# a route's reason's name of each treatment (the tables' short labels are STRATEGY_LABELS, beside the paper's numbers)
TREATMENT_NAMES = {
    PDE: "per-document isolation (PDE)", SDA: "score distribution alignment (SDA)", COT: "CoT de-polarization (CoT)",
    ATF: "adaptive threshold filtering (ATF)", THREE_AGENT: "3-agent baseline",
}


@dataclass(frozen=True)
class Diagnostics:
    """Algorithm 2's Phase 1 for one pair: ``em_nf`` (NF EM, percent); ``rho``, None when
    degenerate; ``rsc_class``, derived from ``rho`` unless given (give it for a rounded tie:
    Table 4's Gemma-2 CONFLICTS .79/.40/.40 is stochastic unrounded); ``entropy`` (for :func:`route_entropy`)."""

    em_nf: float
    rho: tuple[float, float, float] | None
    rsc_class: str | None = None
    entropy: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.em_nf <= 100.0:
            raise ValueError(f"NF EM is a percentage in [0, 100], got {self.em_nf}")
        if self.rho is not None:
            rho = tuple(float(r) for r in self.rho)
            if len(rho) != 3:
                raise ValueError(f"rho needs three values (shuffled, contradicted, random), got {len(rho)}")
            object.__setattr__(self, "rho", rho)
        if self.rsc_class is None:
            derived = rsc.DEGENERATE if self.rho is None else rsc.classify(self.rho).rsc_class
            object.__setattr__(self, "rsc_class", derived)
        elif self.rsc_class not in rsc.RSC_CLASSES:
            raise ValueError(f"rsc_class must be one of {rsc.RSC_CLASSES}, got {self.rsc_class!r}")
        elif self.rho is not None and self.rsc_class != rsc.DEGENERATE and len(set(self.rho)) == 3:
            # Only a tie (rounding) can hide the order; three distinct values fix the class.
            derived = rsc.classify(self.rho).rsc_class
            if derived != self.rsc_class:
                raise ValueError(f"rho {self.rho} is {derived}, not {self.rsc_class}")

    @property
    def rho_star(self) -> float | None:
        return None if self.rho is None else rsc.trend(self.rho)

    @classmethod
    def from_probe(cls, em_nf: float, probe: ProbeStats) -> Diagnostics:
        """Of a probe's statistics (:class:`ProbeStats` or a stored record; ``em_nf`` in percent)."""
        return cls(em_nf=em_nf, rho=probe.rho, rsc_class=probe.rsc_class, entropy=probe.entropy)


@dataclass(frozen=True)
class Thresholds:
    """Routing thresholds, calibrated on the Mistral-7B pilot (Section 5.5); quality-ordered is
    rho* <= ``rho_star`` (any value in [-1.0, -0.7] routes the paper's pairs alike, Appendix D)."""

    tau_nf: float = 30.0
    rho1: float = 0.5
    rho_star: float = -1.0
    entropy: float = 0.7
    # Isolation policy only (madara's, not the paper's; see route_isolation).
    iso_alpha: float = 0.05
    iso_min_gain: float = 0.0


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Route:
    strategy: str
    reason: str  # one line, with the numbers behind the decision


def _num(x: float) -> str:
    return f"{x:g}"


def _rho_star_text(diag: Diagnostics) -> str | None:
    rho_star = diag.rho_star
    return None if rho_star is None or math.isnan(rho_star) else f"ρ* = {rho_star:.2f}"


def _quality_ordered(diag: Diagnostics, thresholds: Thresholds) -> bool | None:
    """Quality-ordered (True), stochastic (False) or degenerate (None): by the class at the default
    rho* threshold (honouring an explicit class for a rounded tie), by rho* at a looser one."""
    if diag.rsc_class == rsc.DEGENERATE:
        return None
    if thresholds.rho_star == DEFAULT_THRESHOLDS.rho_star or diag.rho is None:
        return diag.rsc_class == rsc.QUALITY_ORDERED
    rho_star = diag.rho_star
    if rho_star is None or math.isnan(rho_star):
        return None
    return rho_star <= thresholds.rho_star + 1e-9


def route(diag: Diagnostics, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Route:
    """Algorithm 2 (Appendix E): PDE, SDA, CoT or ATF from NF EM, rho* and rho_1. Degenerate
    scoring goes to PDE whatever NF (Section 6.2: it "independently necessitates per-document
    isolation", Llama-3.1 TriviaQA; only so does D.2's sweep change 1 of 12 cells). A
    quality-ordered pair without rho is a ValueError."""
    nf = f"NF EM {_num(diag.em_nf)}%"
    if diag.em_nf < thresholds.tau_nf:
        return Route(PDE, f"{nf} < τ_NF {_num(thresholds.tau_nf)}% → {TREATMENT_NAMES[PDE]}")
    head = f"{nf} ≥ τ_NF {_num(thresholds.tau_nf)}%"
    ordered = _quality_ordered(diag, thresholds)
    if ordered is None:
        return Route(PDE, f"{head}; degenerate scoring (no usable ρ̂): per-document isolation needs no scores (§6.2) → {TREATMENT_NAMES[PDE]}")
    star = _rho_star_text(diag)
    if not ordered:
        why = f"{star} > {_num(thresholds.rho_star)} (stochastic scoring)" if star else "stochastic scoring"
        return Route(SDA, f"{head}; {why} → {TREATMENT_NAMES[SDA]}")
    if diag.rho is None:
        raise ValueError("a quality-ordered pair needs its rho values to compare rho_1 with the threshold")
    rho1 = diag.rho[0]
    if rho1 < thresholds.rho1:
        coupling, strategy, cmp = "weakly coupled", COT, "<"
    else:
        coupling, strategy, cmp = "strongly coupled", ATF, "≥"
    return Route(
        strategy,
        f"{head}; {star + ' ' if star else ''}(quality-ordered), ρ̂1 {rho1:.2f} {cmp} {_num(thresholds.rho1)} ({coupling})"
        f" → {TREATMENT_NAMES[strategy]}",
    )


def route_nf_only(diag: Diagnostics, tau_nf: float = 30.0) -> Route:
    """Table 19's NF-only policy: PDE if EM_NF < tau_NF, else the 3-agent baseline."""
    nf = f"NF EM {_num(diag.em_nf)}%"
    if diag.em_nf < tau_nf:
        return Route(PDE, f"{nf} < τ_NF {_num(tau_nf)}% → {TREATMENT_NAMES[PDE]}")
    return Route(THREE_AGENT, f"{nf} ≥ τ_NF {_num(tau_nf)}% → {TREATMENT_NAMES[THREE_AGENT]}")


def route_entropy(diag: Diagnostics, threshold: float = 0.7) -> Route:
    """Appendix I's entropy heuristic: SDA if normalised score entropy > 0.7, else CoT."""
    if diag.entropy is None or math.isnan(diag.entropy):
        raise ValueError("entropy routing needs the normalised score entropy")
    if diag.entropy > threshold:
        return Route(SDA, f"score entropy {diag.entropy:.2f} > {_num(threshold)} (noisy scoring) → {TREATMENT_NAMES[SDA]}")
    return Route(COT, f"score entropy {diag.entropy:.2f} ≤ {_num(threshold)} (clean scoring) → {TREATMENT_NAMES[COT]}")


def route_binary_rsc(diag: Diagnostics) -> Route:
    """Table 12's simplified RSC routing: quality-ordered -> CoT, otherwise SDA."""
    if diag.rsc_class == rsc.QUALITY_ORDERED:
        return Route(COT, f"quality-ordered scoring → {TREATMENT_NAMES[COT]}")
    return Route(SDA, f"{diag.rsc_class} scoring → {TREATMENT_NAMES[SDA]}")


# --- madara's isolation policy (beyond the paper) ---

PAPER, ISOLATION = "paper", "isolation"
POLICIES = (PAPER, ISOLATION)


def least_significant_mcnemar(em_nf: float, em_iso: float, n: int) -> float:
    """The largest exact McNemar p of any pairing of two methods with these EMs (published EMs
    hide which queries each got right): ``b - c = k_iso - k_nf`` and ``c`` ranges over
    ``max(0, -d)`` .. ``min(k_nf, n - k_iso)``; more discordance is less significant, so a gain
    significant here is significant however the queries paired."""
    k_nf, k_iso = round(em_nf * n / 100.0), round(em_iso * n / 100.0)
    d = k_iso - k_nf
    lo, hi = max(0, -d), min(k_nf, n - k_iso)
    return max(stats.mcnemar(c + d, c) for c in range(lo, max(lo, hi) + 1))


@dataclass(frozen=True)
class Isolation:
    """One pair's isolation gain: PDE-Random (Table 1's "Rand.") against NF on the same ``n``
    queries, EMs in percent; ``b`` counts queries only PDE-Random gets right, ``c`` the reverse;
    ``p_value``, the exact two-sided McNemar of (b, c), or :func:`least_significant_mcnemar` of
    published EMs (``b``/``c`` None); ``source``, the probe or a paper table (PDE standing in)."""

    em_nf: float
    em_iso: float
    n: int
    p_value: float
    b: int | None = None
    c: int | None = None
    source: str = "probe"

    @property
    def gain(self) -> float:
        """Δ_iso = EM(PDE-Random) − EM(NF), in EM points."""
        return self.em_iso - self.em_nf

    @classmethod
    def from_outcomes(cls, nf_correct: Sequence[bool], iso_correct: Sequence[bool], source: str = "probe") -> Isolation:
        """From per-query correctness of NF and PDE-Random on the same queries, in the same order."""
        if len(nf_correct) != len(iso_correct) or not nf_correct:
            raise ValueError(f"isolation needs paired outcomes on the same queries, got {len(nf_correct)} and {len(iso_correct)}")
        b, c = stats.discordant(iso_correct, nf_correct)
        n = len(nf_correct)
        return cls(100.0 * sum(map(bool, nf_correct)) / n, 100.0 * sum(map(bool, iso_correct)) / n, n, stats.mcnemar(b, c), b, c, source)

    @classmethod
    def from_published(cls, em_nf: float, em_iso: float, n: int, source: str) -> Isolation:
        return cls(float(em_nf), float(em_iso), int(n), least_significant_mcnemar(em_nf, em_iso, n), source=source)

    def text(self) -> str:
        counts = f", b/c {self.b}/{self.c}" if self.b is not None else ""
        return f"Δ_iso {self.gain:+.1f} pt (p = {self.p_value:.2g}{counts}, n = {self.n}, {self.source})"


def isolates(em_nf: float, iso: Isolation, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> tuple[bool, str]:
    """Isolate the documents, or score them? And why, from NF EM (percent) and the gain (:func:`route_isolation`)."""
    nf, tau = f"NF EM {_num(em_nf)}%", _num(thresholds.tau_nf)
    if em_nf < thresholds.tau_nf:
        if iso.gain > thresholds.iso_min_gain:
            return True, f"{nf} < τ_NF {tau}% and {iso.text()} > {_num(thresholds.iso_min_gain)}: isolation helps"
        return False, f"{nf} < τ_NF {tau}% but {iso.text()} ≤ {_num(thresholds.iso_min_gain)}: isolation does not help"
    if iso.gain > 0 and iso.p_value < thresholds.iso_alpha:
        return True, f"{nf} ≥ τ_NF {tau}% but {iso.text()}, significant at {_num(thresholds.iso_alpha)}: isolation helps"
    return False, f"{nf} ≥ τ_NF {tau}% and {iso.text()} not significantly positive"


def route_isolation(diag: Diagnostics, iso: Isolation | None, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Route:
    """madara's isolation policy (docs/isolation.md): the paper's rule, its NF gate informed by
    a measured :class:`Isolation`. Below τ_NF, PDE when Δ_iso > ``iso_min_gain`` (else scoring:
    the paper's MuSiQue pairs); at or above, scoring unless Δ_iso > 0 with McNemar p <
    ``iso_alpha`` (Table 16's dense Llama-3.1-8B): keeping the paper's choice needs the sign,
    overturning it significance. Scoring is :func:`route`'s; ``iso`` None is :func:`route`."""
    if iso is None:
        return route(diag, thresholds)
    isolate, why = isolates(diag.em_nf, iso, thresholds)
    if isolate:
        return Route(PDE, f"{why} → {TREATMENT_NAMES[PDE]}")
    scoring = route(diag, replace(thresholds, tau_nf=-math.inf))
    return Route(scoring.strategy, f"{why}, so the scoring arm; {scoring.reason.split('; ', 1)[-1]}")


def route_policy(policy: str, diag: Diagnostics, iso: Isolation | None = None, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Route:
    """The route under ``policy``: ``paper`` (:func:`route`) or ``isolation`` (:func:`route_isolation`)."""
    if policy == PAPER:
        return route(diag, thresholds)
    if policy == ISOLATION:
        return route_isolation(diag, iso, thresholds)
    raise ValueError(f"unknown routing policy {policy!r}; valid: {', '.join(POLICIES)}")


# --- Threshold sweeps (Appendix D) ---


@dataclass(frozen=True)
class SweepPoint:
    """Every pair's route at one threshold: ``changed``, pairs routed otherwise than by default
    (D.2's count); ``n_cot``, quality-ordered pairs to CoT (Table 8's "Changed");
    ``oracle_matches``/``mean_gap`` (EM points) with EMs, over ``n_evaluated`` pairs."""

    threshold: float
    routes: dict[str, str] = field(hash=False)
    changed: tuple[str, ...]
    n_cells: int
    n_cot: int
    oracle_matches: int | None = None
    mean_gap: float | None = None
    n_evaluated: int | None = None


def oracle_gap(routes: Mapping[str, str], ems: Mapping[str, Mapping[str, float]]) -> tuple[int, float | None, int]:
    """(oracle matches, mean gap in EM points, pairs evaluated): the gap is the best EM minus the
    routed one's (a tie matches); pairs without an EM for their route are left out."""
    gaps = [max(pair.values()) - pair[strategy] for name, strategy in routes.items() if strategy in (pair := ems.get(name) or {})]
    return sum(gap <= 1e-9 for gap in gaps), sum(gaps) / len(gaps) if gaps else None, len(gaps)


def _sweep(diags: Mapping[str, Diagnostics], values: Sequence[float], thresholds_at: Callable[[float], Thresholds],
           ems: Mapping[str, Mapping[str, float]] | None, nf_gate: bool) -> list[SweepPoint]:
    def routes_under(thresholds: Thresholds) -> dict[str, str]:
        gate = thresholds if nf_gate else replace(thresholds, tau_nf=-math.inf)
        return {name: route(d, gate).strategy for name, d in diags.items()}

    default = routes_under(DEFAULT_THRESHOLDS)
    points = []
    for value in values:
        routes = routes_under(thresholds_at(value))
        n_cot = sum(1 for name, s in routes.items() if s == COT and diags[name].rsc_class == rsc.QUALITY_ORDERED)
        matches, gap, n_eval = oracle_gap(routes, ems) if ems is not None else (None, None, None)
        changed = tuple(name for name in routes if routes[name] != default[name])
        points.append(SweepPoint(float(value), routes, changed, len(routes), n_cot, matches, gap, n_eval))
    return points


def sweep_rho1(diags: Mapping[str, Diagnostics], values: Sequence[float] = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8),
               ems: Mapping[str, Mapping[str, float]] | None = None, nf_gate: bool = False) -> list[SweepPoint]:
    """Appendix D.1 / Table 8: every pair routed at each rho_1 threshold. Table 8 sweeps the
    scoring arm alone (its 1, 2, 2, 3, 6, 7 of 10 add up only with the NF gate off: it calls
    Llama CONFLICTS, a PDE pair, "misrouted to CoT" at 0.8); ``nf_gate=True`` is Algorithm 2."""
    return _sweep(diags, values, lambda v: replace(DEFAULT_THRESHOLDS, rho1=float(v)), ems, nf_gate)


def sweep_tau_nf(diags: Mapping[str, Diagnostics], values: Sequence[float] = (15, 20, 25, 30, 35, 40, 45),
                 ems: Mapping[str, Mapping[str, float]] | None = None) -> list[SweepPoint]:
    """Appendix D.2: route every pair (full Algorithm 2) with tau_NF in ``values`` (%)."""
    return _sweep(diags, values, lambda v: replace(DEFAULT_THRESHOLDS, tau_nf=float(v)), ems, True)


def changed_cells(points: Sequence[SweepPoint]) -> tuple[str, ...]:
    """Pairs whose routing changes at any threshold of a sweep (D.2's "1/12 cells")."""
    return tuple(dict.fromkeys(name for point in points for name in point.changed))
