"""A results folder told as Diagnose → Treat, one card per probed model × benchmark: NF EM (the
cell's and the probe's), the probe's ρ̂ and class, the route and the router's reason, and the
routed EM beside NF with McNemar's exact test on their shared queries. The report page shows
the cards first and ``madara report`` prints them as lines; nothing here runs or re-routes.
"""

from __future__ import annotations

from dataclasses import dataclass

from madara_cli import paper as pv
from madara_cli.results.health import MARK
from madara_cli.results.outputs import ProbeRecord
from madara_cli.tables.builders.common import madara_outcome, paired_test
from madara_cli.tables.lookup import Results, StoredCell, probed_pairs
from madara_cli.tables.pairs import CAPABILITY_FLOOR


@dataclass(frozen=True)
class Paired:
    """McNemar on the queries two cells share: b (routed right, NF wrong), c (the reverse)."""

    n: int
    b: int
    c: int
    p: float


@dataclass(frozen=True)
class Card:
    model: str
    benchmark: str
    probe: ProbeRecord
    nf: StoredCell | None  # the No-Filter cell
    route: str | None  # the treatment the probe routed to (the madara cell's, where it ran)
    routed: StoredCell | None  # the madara cell, else the routed strategy's own cell
    routed_source: str  # "madara cell" | "<route> cell (routed)" | ""
    paired: Paired | None  # routed vs NF, when both cells' predictions are on disk

    @property
    def label(self) -> str:
        return f"{pv.MODEL_LABELS.get(self.model, self.model)} × {pv.BENCHMARK_LABELS.get(self.benchmark, self.benchmark)}"

    @property
    def nf_em(self) -> float | None:
        """The NF cell's EM in %, else the probe's calibration NF."""
        if self.nf is not None and self.nf.em is not None:
            return 100 * self.nf.em
        return None if self.probe.em_nf is None else 100 * self.probe.em_nf

    @property
    def routed_em(self) -> float | None:
        return None if self.routed is None or self.routed.em is None else 100 * self.routed.em


def _paired(routed: StoredCell | None, nf: StoredCell | None) -> Paired | None:
    test = paired_test(routed, nf)
    return None if test is None else Paired(*test)


def cards(results: Results) -> list[Card]:
    """One card per probed model × benchmark, the paper's models first."""
    pairs = probed_pairs(results)
    out = []
    for model, benchmark in pairs:
        probe = results.probe(model, benchmark)
        nf = results.find(model, benchmark, "nf") or None  # several NF variants (Unsettled): no NF cell to read
        route, _, routed, source = madara_outcome(results, model, benchmark, None)
        route = route or probe.route
        out.append(Card(model, benchmark, probe, nf, route, routed, source, _paired(routed, nf)))
    return out


def pct(x: float | None, cell: StoredCell | None = None) -> str:
    """A percentage, marked :data:`~madara_cli.results.health.MARK` when it rests on a degraded ``cell``."""
    return "—" if x is None else f"{x:.1f}%{MARK if cell is not None and cell.degraded else ''}"


def rho_text(probe: ProbeRecord) -> str:
    """ρ̂1/ρ̂2/ρ̂3 as the probe measured them (— for a level it could not measure)."""
    values = [probe.rho_at(i) for i in range(3)]
    if all(v is None for v in values):
        return "no ρ̂ (degenerate scores)" if probe.is_degenerate else "no ρ̂"
    return "ρ̂ " + "/".join("—" if v is None else f"{v:+.2f}" for v in values)


def paired_text(card: Card) -> str:
    if card.paired is None:
        return "no paired test (a cell's predictions are missing)"
    p = card.paired
    return f"McNemar exact p = {p.p:.2g} on {p.n} shared queries (routed right/NF wrong {p.b}, the reverse {p.c})"


def diagnose_line(card: Card) -> str:
    probe = card.probe
    cal = "" if probe.em_nf is None else f" ({100 * probe.em_nf:.1f}% on the probe's {probe.n} calibration queries)"
    route = pv.STRATEGY_LABELS.get(card.route or "", card.route or "no route")
    return (f"Diagnose  {card.label}: NF EM {pct(card.nf_em, card.nf)}{cal}; RSC class {pv.CLASS_LABELS.get(probe.rsc_class, probe.rsc_class or '—')}, "
            f"{rho_text(probe)} → route {route}: {probe.reason or 'no reason recorded'}")


def below_floor_text(card: Card) -> str:
    """The routed cell's F1 and contains beside NF's where an EM is under the capability floor; else empty."""
    nf = card.nf
    if card.routed is None or nf is None or nf.em is None or card.routed_em is None:
        return ""
    if min(card.routed_em, 100 * nf.em) >= CAPABILITY_FLOOR:
        return ""
    r = card.routed
    return (f"F1 {_frac(r.f1)} vs {_frac(nf.f1)}, contains {_frac(r.contains)} vs {_frac(nf.contains)} "
            f"(EM under the {CAPABILITY_FLOOR:.0f}% floor says little)")


def health_text(card: Card) -> str:
    """The card's degraded cells (results/health.py), each with its stage and cause; else empty."""
    cells = (("routed", card.routed), ("NF", card.nf))
    return "; ".join(f"{what} cell degraded ({c.record.health.reason})" for what, c in cells if c is not None and c.degraded)


def _frac(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def treat_line(card: Card) -> str:
    route = pv.STRATEGY_LABELS.get(card.route or "", card.route or "?")
    if card.routed_em is None:
        return f"Treat     {card.label}: the routed {route} has not run (madara run model={card.model} benchmark={card.benchmark} strategy=madara)"
    nf = card.nf.em * 100 if card.nf is not None and card.nf.em is not None else None
    delta = "" if nf is None else f" ({card.routed_em - nf:+.1f} pp)"
    floor = below_floor_text(card)
    health = health_text(card)
    return (f"Treat     {card.label}: routed {route} EM {pct(card.routed_em, card.routed)} vs NF {pct(nf, card.nf)}{delta} on {card.routed.n} queries; "
            f"{paired_text(card)}{'; ' + floor if floor else ''}{'; ' + health if health else ''}")


def story_lines(results: Results, page: str, next_command: str | None = None, most: int = 3, results_arg: str | None = None) -> list[str]:
    """``madara report``'s lines: Diagnose and Treat per card (at most ``most``), where to look, what next
    (``results_arg``: the user's ``--results``, repeated in ``madara show``)."""
    found = cards(results)
    lines: list[str] = []
    for card in found[:most]:
        lines += [diagnose_line(card), treat_line(card)]
    if len(found) > most:
        lines.append(f"          … and {len(found) - most} more probed pair(s) on the page")
    if not found:
        lines.append("Diagnose  no RSC probe in this folder: madara probe model=M benchmark=B (or strategy=madara) writes one")
    lines.append(f"Look      open {page}   (the Diagnose → Treat cards first, then figures, routing map, tables)")
    shown = next((c.routed for c in found if c.routed is not None), None)
    where = f" --results {results_arg}" if results_arg else ""
    steps = [f"madara show {shown.key}{where} (the routed cell at a glance; --all adds its provenance)"] if shown is not None else []
    steps.append(next_command or "madara ls grids (what else can run)")
    lines.append("Next      " + "   ·   ".join(steps))
    return lines

