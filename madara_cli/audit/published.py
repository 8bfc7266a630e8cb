"""The paper's printed values as several checks (and :mod:`.policies`) read them: the
router's inputs, the EM another table prints for the same cell, every EM printed for a
pair, and the RSC trends and classes (diagnose/rsc.py's rules) that printed, possibly
tied, ρ̂ allow."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from madara_cli import paper as pv
from madara_cli.diagnose import router as routing
from madara_cli.diagnose import rsc


def tie_breaks(rhos: Sequence[float]) -> list[np.ndarray]:
    """The ρ̂ consistent with the printed ones when printed ties may break either way."""
    values = np.asarray(rhos, dtype=float)
    return [values + 1e-6 * np.asarray(offsets) for offsets in itertools.permutations(range(len(values)))]


def possible_trends(rhos: Sequence[float]) -> set[float]:
    """ρ* values (:func:`madara_cli.diagnose.rsc.trend`) consistent with the printed ρ̂."""
    return {round(rsc.trend(values), 6) for values in tie_breaks(rhos)}


def possible_classes(rhos: Sequence[float]) -> set[str]:
    """RSC classes (:func:`madara_cli.diagnose.rsc.classify`) consistent with the printed ρ̂."""
    return {rsc.classify(values).rsc_class for values in tie_breaks(rhos)}


def published_diagnostics(triviaqa: bool = False) -> dict[tuple[str, str], routing.Diagnostics]:
    """The router's inputs as the paper prints them: NF EM from Table 2 (Table 1 for
    TriviaQA), ρ̂1..3 from Table 4, the class from Table 2 / Table 4 (explicit, since
    rounded ρ̂ can tie). ``triviaqa`` adds the two TriviaQA cells Appendix D.2 routes
    beside Table 2's ten (Mistral, quality-ordered; Llama, degenerate scoring): D.2's
    "12 model–task cells"."""
    def rho(pair: tuple[str, str]) -> tuple[float, ...]:
        return tuple(pv.TABLE4[(*pair, f"rho{k}")] for k in (1, 2, 3))

    out = {pair: routing.Diagnostics(pv.TABLE2[(*pair, "nf")], rho(pair), pv.TABLE2[(*pair, "rsc_class")]) for pair in pv.ROUTING_PAIRS}
    if triviaqa:
        mistral, llama = ("mistral-7b", "triviaqa"), ("llama-3.1-8b", "triviaqa")
        out[mistral] = routing.Diagnostics(pv.TABLE1[(*mistral, "nf")], rho(mistral), pv.TABLE4[(*mistral, "rsc_class")])
        out[llama] = routing.Diagnostics(pv.TABLE1[(*llama, "nf")], None)  # Table 4 ‡: degenerate scoring
    return out


def reference_em(model: str, benchmark: str, strategy: str) -> tuple[float | None, str]:
    """The EM another table prints for the same (model, benchmark, strategy)."""
    key = (model, benchmark, strategy)
    if key in pv.TABLE2:
        return pv.TABLE2[key], "Table 2"
    if strategy == "pde" and pv.TABLE2.get((model, benchmark, "strategy")) == "pde":
        return pv.TABLE2[(model, benchmark, "madara")], "Table 2 (MADARA)"
    if key in pv.TABLE7:
        return pv.TABLE7[key][0], "Table 7"
    if pv.TABLE12.get((model, benchmark, "oracle")) == strategy:
        return pv.TABLE12[(model, benchmark, "oracle_em")], "Table 12 (oracle)"
    return None, ""


def printed_ems(model: str, benchmark: str) -> dict[str, float]:
    """Every EM the paper prints for a (model, benchmark) pair, by strategy."""
    ems = {s: pv.TABLE2[(model, benchmark, s)] for s in ("nf", "three_agent", "cot", "sda")}
    ems[pv.TABLE2[(model, benchmark, "strategy")]] = pv.TABLE2[(model, benchmark, "madara")]
    for (m, b, s), (em, _) in pv.TABLE7.items():
        if (m, b) == (model, benchmark):
            ems.setdefault(s, em)
    for r in pv.TABLE14:
        if (r.model, r.benchmark) == (model, benchmark):
            ems.setdefault(r.method, r.method_em)
    if (model, benchmark, "pde") in pv.TABLE15:
        ems.setdefault("pde", pv.TABLE15[(model, benchmark, "pde")])
    ems.setdefault(pv.TABLE12[(model, benchmark, "oracle")], pv.TABLE12[(model, benchmark, "oracle_em")])
    return ems
