"""Tests of MADARA routing (madara_cli.diagnose.router) against the paper's Tables 2, 8, 12, 19."""

from __future__ import annotations

import pytest

from madara_cli.diagnose import router
from madara_cli.diagnose.router import Diagnostics, Thresholds

# Table 2 diagnostics: NF EM (%) and Table 4's rho row, with Table 2's RSC class,
# and Table 2's MADARA strategy.
TABLE2 = {
    "llama/cfl": (13.9, (0.76, 0.43, 0.08), "quality-ordered", "pde"),
    "llama/fvr": (88.7, (0.65, 0.49, 0.10), "quality-ordered", "atf"),
    "mistral/cfl": (18.1, (0.35, 0.22, 0.18), "quality-ordered", "pde"),
    "mistral/fvr": (90.7, (0.28, 0.09, 0.01), "quality-ordered", "cot"),
    "qwen3/cfl": (60.8, (0.39, 0.04, 0.14), "stochastic", "sda"),
    "qwen3/fvr": (89.6, (0.63, 0.51, 0.14), "quality-ordered", "atf"),
    "qwen2.5/cfl": (59.9, (0.46, -0.26, 0.08), "stochastic", "sda"),
    "qwen2.5/fvr": (87.1, (0.62, 0.21, 0.06), "quality-ordered", "atf"),
    "gemma/cfl": (60.8, (0.79, 0.40, 0.40), "stochastic", "sda"),
    "gemma/fvr": (92.2, (0.58, 0.41, 0.18), "quality-ordered", "atf"),
}

# Table 2's EMs per strategy (MADARA's own EM fills in the routed PDE/ATF cell).
TABLE2_EMS = {
    "llama/cfl": {"nf": 13.9, "three_agent": 24.1, "cot": 16.5, "sda": 19.4, "pde": 50.2},
    "llama/fvr": {"nf": 88.7, "three_agent": 87.8, "cot": 88.4, "sda": 88.2, "atf": 90.9},
    "mistral/cfl": {"nf": 18.1, "three_agent": 18.6, "cot": 22.8, "sda": 20.3, "pde": 43.5},
    "mistral/fvr": {"nf": 90.7, "three_agent": 90.9, "cot": 92.6, "sda": 90.7},
    "qwen3/cfl": {"nf": 60.8, "three_agent": 62.4, "cot": 62.4, "sda": 63.0},
    "qwen3/fvr": {"nf": 89.6, "three_agent": 89.8, "cot": 89.5, "sda": 90.0, "atf": 90.9},
    "qwen2.5/cfl": {"nf": 59.9, "three_agent": 65.0, "cot": 62.4, "sda": 65.4},
    "qwen2.5/fvr": {"nf": 87.1, "three_agent": 88.9, "cot": 87.5, "sda": 90.5, "atf": 88.2},
    "gemma/cfl": {"nf": 60.8, "three_agent": 64.6, "cot": 63.3, "sda": 63.3},
    "gemma/fvr": {"nf": 92.2, "three_agent": 92.4, "cot": 92.5, "sda": 92.5, "atf": 93.6},
}


def table2_diags(with_class: bool = True) -> dict[str, Diagnostics]:
    return {name: Diagnostics(em_nf=nf, rho=rho, rsc_class=cls if with_class else None) for name, (nf, rho, cls, _) in TABLE2.items()}


@pytest.mark.parametrize("name", sorted(TABLE2))
@pytest.mark.parametrize("with_class", [True, False])
def test_table2_routes(name, with_class):
    diag = table2_diags(with_class)[name]
    expected_class, expected_strategy = TABLE2[name][2], TABLE2[name][3]
    assert diag.rsc_class == expected_class
    assert router.route(diag).strategy == expected_strategy


def test_reason_names_the_numbers():
    reason = router.route(Diagnostics(13.9, (0.76, 0.43, 0.08))).reason
    assert reason == "NF EM 13.9% < τ_NF 30% → per-document isolation (PDE)"
    cot = router.route(Diagnostics(90.7, (0.28, 0.09, 0.01))).reason
    assert "90.7%" in cot and "0.28 < 0.5" in cot and "(CoT)" in cot
    sda = router.route(Diagnostics(60.8, (0.39, 0.04, 0.14))).reason
    assert "ρ* = -0.50" in sda and "(SDA)" in sda


def test_boundaries_are_inclusive_as_in_algorithm_2():
    assert router.route(Diagnostics(30.0, (0.7, 0.5, 0.1))).strategy == "atf"  # NF == tau is not weak
    assert router.route(Diagnostics(29.99, (0.7, 0.5, 0.1))).strategy == "pde"
    assert router.route(Diagnostics(50.0, (0.5, 0.4, 0.1))).strategy == "atf"  # rho_1 == 0.5 is strong
    assert router.route(Diagnostics(50.0, (0.49, 0.4, 0.1))).strategy == "cot"


def test_degenerate_scoring_routes():
    # Llama-3.1 TriviaQA: degenerate scoring, NF 29.8 < 30 -> PDE regardless.
    assert router.route(Diagnostics(29.8, None)).strategy == "pde"
    # Section 6.2: degenerate scoring "independently necessitates per-document isolation",
    # so a strong baseline does not rescue it.
    strong = router.route(Diagnostics(70.0, None))
    assert strong.strategy == "pde" and "degenerate" in strong.reason
    assert Diagnostics(70.0, None).rsc_class == "degenerate"


def test_diagnostics_validation():
    with pytest.raises(ValueError):
        Diagnostics(0.5, (0.1, 0.2))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Diagnostics(139.0, (0.7, 0.5, 0.1))
    with pytest.raises(ValueError):
        Diagnostics(50.0, (0.76, 0.43, 0.08), rsc_class="stochastic")  # distinct values fix the class
    with pytest.raises(ValueError):
        router.route(Diagnostics(50.0, None, rsc_class="quality-ordered"))  # rho_1 unknown
    # A rounded tie may be either class: the explicit class wins.
    tie = Diagnostics(50.0, (0.79, 0.40, 0.40), rsc_class="quality-ordered")
    assert router.route(tie).strategy == "atf"


def test_rho_star_threshold_plateau():
    # Appendix D: any rho* threshold in [-1.0, -0.7] routes the paper's pairs identically.
    # From Table 4's *rounded* rho, Gemma-2 CONFLICTS (.79/.40/.40) has rho* = -0.866
    # instead of the paper's -0.5, so it alone flips once the threshold passes -0.866.
    default = {n: router.route(d).strategy for n, d in table2_diags(False).items()}
    for t, flipped in ((-0.9, {}), (-0.8, {"gemma/cfl": "atf"}), (-0.7, {"gemma/cfl": "atf"})):
        alt = {n: router.route(d, Thresholds(rho_star=t)).strategy for n, d in table2_diags(False).items()}
        assert alt == {**default, **flipped}
    # Loosened past -0.5, the stochastic CONFLICTS pairs turn quality-ordered.
    loose = router.route(table2_diags(False)["qwen3/cfl"], Thresholds(rho_star=-0.5))
    assert loose.strategy == "cot"


def test_route_nf_only_table19():
    assert router.route_nf_only(Diagnostics(13.9, None)).strategy == "pde"
    assert router.route_nf_only(Diagnostics(88.7, (0.65, 0.49, 0.10))).strategy == "three_agent"


# Table 12: (RSC class, entropy) -> (RSC recommendation, entropy recommendation).
TABLE12 = {
    "llama/cfl": ("quality-ordered", 0.75, "cot", "sda"),
    "mistral/cfl": ("quality-ordered", 0.91, "cot", "sda"),
    "qwen3/cfl": ("stochastic", 0.84, "sda", "sda"),
    "qwen2.5/cfl": ("stochastic", 0.82, "sda", "sda"),
    "gemma/cfl": ("stochastic", 0.85, "sda", "sda"),
    "llama/fvr": ("quality-ordered", 0.89, "cot", "sda"),
    "mistral/fvr": ("quality-ordered", 0.80, "cot", "sda"),
    "qwen3/fvr": ("quality-ordered", 0.58, "cot", "cot"),
    "qwen2.5/fvr": ("quality-ordered", 0.44, "cot", "cot"),
    "gemma/fvr": ("quality-ordered", 0.61, "cot", "cot"),
}


def test_table12_binary_and_entropy_routing():
    agree = 0
    for name, (cls, entropy, by_rsc, by_entropy) in TABLE12.items():
        diag = Diagnostics(em_nf=TABLE2[name][0], rho=TABLE2[name][1], rsc_class=cls, entropy=entropy)
        rsc_route = router.route_binary_rsc(diag).strategy
        entropy_route = router.route_entropy(diag).strategy
        assert (rsc_route, entropy_route) == (by_rsc, by_entropy), name
        agree += rsc_route == entropy_route
    assert agree == 6  # Table 12: "Agreement (same recommendation) 6/10"
    with pytest.raises(ValueError):
        router.route_entropy(Diagnostics(50.0, None))


def test_tau_nf_sweep_changes_only_mistral_conflicts_at_15():
    points = router.sweep_tau_nf(table2_diags(), ems=TABLE2_EMS)
    assert [p.threshold for p in points] == [15, 20, 25, 30, 35, 40, 45]
    by_tau = {p.threshold: p for p in points}
    assert by_tau[15].changed == ("mistral/cfl",)
    assert by_tau[15].routes["mistral/cfl"] == "cot"
    assert all(not p.changed for t, p in by_tau.items() if t != 15)
    assert router.changed_cells(points) == ("mistral/cfl",)
    assert all(p.n_cells == 10 for p in points)
    # At 15 the flip loses the oracle on that cell and 43.5 - 22.8 EM points.
    assert by_tau[30].oracle_matches == by_tau[15].oracle_matches + 1
    assert by_tau[15].mean_gap == pytest.approx(by_tau[30].mean_gap + (43.5 - 22.8) / 10)


def test_rho1_sweep_reproduces_table8_changed_column():
    points = router.sweep_rho1(table2_diags())
    assert [p.n_cot for p in points] == [1, 2, 2, 3, 6, 7]  # Table 8, "Changed" (of 10)
    by_tau = {p.threshold: p for p in points}
    assert by_tau[0.5].changed == ()
    assert by_tau[0.8].routes["llama/cfl"] == "cot"  # "Llama-CFL misrouted to CoT"
    # With the NF gate, weak-baseline pairs stay on PDE whatever the rho_1 threshold.
    gated = router.sweep_rho1(table2_diags(), nf_gate=True)
    assert all(p.routes["llama/cfl"] == "pde" and p.routes["mistral/cfl"] == "pde" for p in gated)


def test_oracle_gap_on_table2():
    routes = {n: router.route(d).strategy for n, d in table2_diags().items()}
    matches, gap, n = router.oracle_gap(routes, TABLE2_EMS)
    assert n == 10
    # The two misses Table 2 itself marks: qwen2.5/fvr (ATF 88.2 vs SDA 90.5, its dagger)
    # and gemma/cfl (SDA 63.3 vs 3-agent 64.6).
    assert matches == 8
    assert gap == pytest.approx(((90.5 - 88.2) + (64.6 - 63.3)) / 10)


def test_from_probe():
    import numpy as np

    from madara_cli.diagnose import rsc

    rng = np.random.default_rng(0)
    latent = rng.normal(size=(40, 10))
    score = lambda z: np.clip(np.round(2.5 + 1.2 * z), 0, 5)  # noqa: E731
    levels = [score(latent + rng.normal(scale=s, size=latent.shape)) for s in (0.5, 1.5, 6.0)]
    probe = rsc.summarize_probe(score(latent), levels, n_resamples=50)
    diag = Diagnostics.from_probe(75.0, probe)
    assert diag.rsc_class == "quality-ordered"
    assert router.route(diag).strategy == "atf"
