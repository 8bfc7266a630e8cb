"""The paper's self-audit: recomputing printed numbers from other printed numbers."""

from __future__ import annotations

import pytest

from madara_cli import paper as pv
from madara_cli.audit import STATUSES, format_audit, published_diagnostics, run_audit, summarize
from madara_cli.audit.main_body import audit_table2, audit_table9
from madara_cli.audit.routes import audit_table8


@pytest.fixture(scope="module")
def rows():
    return run_audit()


def _find(rows, table, contains):
    hits = [r for r in rows if r.table == table and contains in r.item]
    assert hits, f"no audit row in {table} containing {contains!r}"
    return hits


def test_audit_runs_offline():
    result = run_audit()
    assert len(result) > 100
    assert {r.status for r in result} <= set(STATUSES)


def test_table14_llama_pde_vs_nf_matches_exact_test(rows):
    exact = _find(rows, "Table 14", "Llama-3.1-8B Conflicts PDE vs NF: p (exact)")[0]
    assert exact.status == "match" and exact.published == "2.4e-18"
    cc = _find(rows, "Table 14", "Llama-3.1-8B Conflicts PDE vs NF: p (χ² cc)")[0]
    assert cc.status == "discrepancy"


def test_table14_scoring_rows_follow_the_continuity_corrected_test(rows):
    # DESIGN.md: the scoring-only p-values match chi2-cc rather than the exact test the caption names.
    row = _find(rows, "Table 14", "Qwen2.5-7B Conflicts SDA vs NF: p (")
    by_variant = {("exact" if "exact" in r.item else "cc"): r.status for r in row}
    assert by_variant == {"exact": "discrepancy", "cc": "match"}


def test_table4_classes_all_match(rows):
    classes = _find(rows, "Table 4", ": RSC class")
    assert len(classes) == 14
    assert all(r.status == "match" for r in classes)


def test_table2_routes_match_printed_strategies(rows):
    routes = _find(rows, "Table 2", "routed strategy")
    assert len(routes) == 10
    assert all(r.status == "match" for r in routes)
    # The ATF† footnote is carried in the note rather than flagged as a mismatch.
    qwen_fever = next(r for r in routes if "Qwen2.5-7B FEVER" in r.item)
    assert "†" in qwen_fever.note


def test_known_discrepancies_are_reported(rows):
    spearman = _find(rows, "Table 16", "Spearman")[0]
    assert spearman.status == "discrepancy" and spearman.recomputed == "-0.70"
    costs = _find(rows, "Table 1", "cost multiplier")
    assert all(r.status == "discrepancy" for r in costs)
    assert any("29×" in r.recomputed for r in costs)


def test_table12_and_table3_counts(rows):
    assert _find(rows, "Table 3", "beats nf (RSC)")[0].status == "match"
    assert _find(rows, "Table 12", "agreement")[0].recomputed == "6/10"


def test_table19_recomputes_rsc_gaps(rows):
    rsc = _find(rows, "Table 19", "RSC-based gap")
    assert all(r.status == "match" for r in rsc)


def test_format_audit_lists_both_values(rows):
    text = format_audit(rows)
    assert "published 2.4e-18" in text and "recomputed" in text
    counts = summarize(rows)
    assert f"{counts['match']} match" in text
    only = format_audit(rows, only="discrepancy")
    assert "[match]" not in only


def test_trend_and_class_consistent_with_printed_ties():
    from madara_cli.audit.published import possible_classes, possible_trends

    assert possible_trends([0.76, 0.43, 0.08]) == {-1.0}
    assert possible_classes([0.46, -0.26, 0.08]) == {"stochastic"}
    # Table 4's Gemma-2 CONFLICTS row .79/.40/.40: the printed tie breaks either way.
    assert possible_trends([0.79, 0.40, 0.40]) == {-1.0, -0.5}
    assert possible_classes([0.79, 0.40, 0.40]) == {"quality-ordered", "stochastic"}


def test_the_audit_checks_with_the_rules_madara_runs(monkeypatch):
    """No rule of its own: the trend, the class and Table 12's two policies are
    diagnose/rsc.py's and diagnose/router.py's, so changing one moves the audit."""
    from madara_cli.audit import routes, rsc_probe
    from madara_cli.diagnose import router, rsc

    monkeypatch.setattr(rsc, "trend", lambda rhos: 0.5)
    assert {r.recomputed for r in rsc_probe.audit_table4() if r.item.endswith(": ρ*")} == {"0.500"}
    monkeypatch.setattr(rsc, "classify", lambda rhos, threshold=0.5: rsc.RSCClass((0, 0, 0), 0.0, "degenerate", None, 0.0))
    assert {r.recomputed for r in rsc_probe.audit_table4() if r.item.endswith(": RSC class")} == {"degenerate"}
    monkeypatch.setattr(router, "route_entropy", lambda diag, threshold: router.Route(router.PDE, "spy"))
    monkeypatch.setattr(router, "route_binary_rsc", lambda diag: router.Route(router.ATF, "spy"))
    recs = [r.recomputed for r in routes.audit_table12() if r.item.endswith(": recommendations")]
    assert recs and all(r.startswith("RSC ATF") and "entropy PDE" in r for r in recs)


def _audit_row(rows, table, item_start):
    matches = [r for r in rows if r.table == table and r.item.startswith(item_start)]
    assert matches, f"no {table} row starting {item_start!r}"
    return matches


def test_the_one_router_reproduces_table2_table8_and_d2():
    from madara_cli.diagnose import router

    # Table 2's ten routes, from the published diagnostics, by router.route itself.
    diags = published_diagnostics()
    assert {k: router.route(d).strategy for k, d in diags.items()} == {k: pv.TABLE2[(*k, "strategy")] for k in pv.ROUTING_PAIRS}
    routes = _audit_row(audit_table2(), "Table 2", "")
    assert sum(r.item.endswith("routed strategy") and r.status == "match" for r in routes) == 10
    # Table 8's "Changed" column: 1, 2, 2, 3, 6, 7 of 10.
    changed = [r for r in audit_table8() if "changed" in r.item]
    assert [r.recomputed for r in changed] == [f"{c[0]}/{c[1]}" for c, _, _ in pv.TABLE8.values()]
    assert all(r.status == "match" for r in changed)
    # D.2: the tau_NF sweep over 12 cells changes exactly one (Mistral CONFLICTS at 15%, to CoT).
    sweep = _audit_row(audit_table9(), "Table 9", "τ_NF sweep")[0]
    assert (sweep.recomputed, sweep.status) == ("1/12", "match")
    assert "Mistral-7B" in sweep.note and "15%" in sweep.note


def test_paper_values_are_complete():
    assert len(pv.TABLE14) == 13
    assert {(m, b) for (m, b, _) in pv.TABLE2} == set(pv.ROUTING_PAIRS)
    assert len({(m, b) for (m, b, _) in pv.TABLE4}) == 14
    assert pv.TABLE18_CALLS["pde"] == 29 and pv.TABLE18_CALLS["pde_random"] == 10
