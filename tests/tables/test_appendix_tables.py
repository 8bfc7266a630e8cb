"""The analyses the paper prints in its text (§4.1 polarization, App. B ATF behaviour,
App. H capability floor, App. J hop analysis), each beside the printed values and
checked against values computed by hand."""

from __future__ import annotations

from madara_cli.tables import load_results
from madara_cli.tables.builders import resolve_table_name
from madara_cli.tables.builders.appendix import table_b_atf, table_h_floor, table_polarization
from madara_cli.tables.builders.musique import table_j_hops
from tests.results_fixtures import update_cell, update_predictions, write_cell


def _by_agent(relevance, consistency, conflict):
    return {name: {"extreme_score_rate": rate, "n_valid": n} for name, (rate, n) in
            (("relevance", relevance), ("consistency", consistency), ("conflict", conflict))}


def test_polarization_counts_the_0_5_scorers_not_the_conflict_detector(tmp_path):
    base = write_cell(tmp_path, "table2", "mistral-7b", "conflicts", "three_agent", [0])
    cot = write_cell(tmp_path, "table2", "mistral-7b", "conflicts", "cot", [0])
    # Pooled over relevance and consistency: (0.8*40 + 0.7*60) / 100 = 74%; the detector's
    # ±2 (all of its 100 scores) would have pulled the all-agent rate to 87%.
    update_cell(base, assessment={"extreme_score_rate": 0.87, "by_agent": _by_agent((0.8, 40), (0.7, 60), (1.0, 100))})
    update_cell(cot, assessment={"extreme_score_rate": 0.33, "by_agent": _by_agent((0.05, 50), (0.05, 50), (0.9, 100))})
    row = table_polarization(load_results(tmp_path)).iloc[0]
    assert row["Extreme scores, base (%)"] == "74.0 / 80.8 (−6.8)"
    assert row["Extreme scores, CoT (%)"] == "5.0 / 3.5 (+1.5)"
    assert row["Drop (pp)"] == "69.0 / 77.3 (−8.3)"


def test_atf_behaviour_from_predictions(tmp_path):
    cell = write_cell(tmp_path, "table2", "qwen2.5-7b", "conflicts", "atf", [0], n=4)
    kept = [5, 5, 5, 3]  # 3 of 4 keep all top-5: 75%; mean kept 4.5
    mus = [2.0, 2.5, 3.0, 2.5]  # mean 2.5
    update_predictions(cell, lambda i, r: r.update(doc_ids=[f"d{j}" for j in range(kept[i])], extra={"mu": mus[i], "threshold": mus[i] - 0.5}))
    row = table_b_atf(load_results(tmp_path)).iloc[0]
    assert row["Keeps all top-5 (%)"] == "75.0 / 83.6 (−8.6)"
    assert row["Mean μ"] == "2.50 / 2.38 (+0.12)"
    assert row["Mean docs kept"] == "4.5 / 4.8 (−0.3)"
    assert row["n"].startswith("4 / 458")


def test_atf_keeps_all_means_all_k_not_the_most_any_query_kept(tmp_path):
    cell = write_cell(tmp_path, "table2", "qwen2.5-7b", "conflicts", "atf", [0], n=4)
    kept = [4, 4, 3, 4]  # no query keeps all 5 (max(kept) = 4 would call three of them "all")
    update_predictions(cell, lambda i, r: r.update(doc_ids=[f"d{j}" for j in range(kept[i])], extra={"mu": 2.0, "max_keep": 5}))
    assert table_b_atf(load_results(tmp_path)).iloc[0]["Keeps all top-5 (%)"] == "0.0 / 83.6 (−83.6)"
    update_predictions(cell, lambda i, r: r.update(extra={"mu": 2.0, "max_keep": 4}))  # a cell run with strategy.top_k=4
    assert table_b_atf(load_results(tmp_path)).iloc[0]["Keeps all top-5 (%)"].startswith("75.0 / 83.6")


def test_capability_floor_row(tmp_path):
    write_cell(tmp_path, "floor", "llama-2-13b", "conflicts", "nf", [0], n=50)  # 2%
    write_cell(tmp_path, "floor", "llama-2-13b", "conflicts", "pde", [0, 1, 2, 3], n=50)  # 8%
    row = table_h_floor(load_results(tmp_path)).iloc[0]
    assert (row["NF"], row["PDE"], row["PDE − NF"]) == ("2.0 / 2.1 (−0.1)", "8.0 / 7.6 (+0.4)", "+6.0 / +5.5 (+0.5)")


def test_hop_support_by_hop_count(tmp_path):
    cell = write_cell(tmp_path, "table6", "qwen2.5-7b", "musique", "pde", [0], n=4)
    ids = ["2hop__1", "2hop__2", "3hop1__3", "4hop2__4"]
    found = [(1, 2), (2, 2), (1, 3), (1, 4)]  # 2-hop mean (0.5 + 1) / 2 = 0.75; 3-hop 1/3; 4-hop 0.25
    update_predictions(cell, lambda i, r: r.update(id=ids[i], extra={"supporting_in_topk": found[i][0], "n_supporting": found[i][1]}))
    row = table_j_hops(load_results(tmp_path)).iloc[0]
    assert row["2-hop"] == "0.75 / 0.57 (+0.18)"
    assert row["3-hop"] == "0.33 / n/a"
    assert row["4-hop"] == "0.25 / 0.33 (−0.08)"
    assert (row["n 2-hop"], row["n 4-hop"]) == ("2", "1")


def test_new_tables_resolve_by_short_name():
    assert resolve_table_name("polarization") == "table_polarization"
    assert resolve_table_name("b_atf") == "table_b_atf"
    assert resolve_table_name("g1") == "table_g1" and resolve_table_name("2") == "table2"
