"""Which NF EM the routing tables route on (Tables 8, 9, 19): the probe's calibration
NF by default, what strategy=madara routes on; the NF cell with --routing-nf full.
Each table's footnote names the source."""

from __future__ import annotations

import pytest

from madara_cli.tables import load_results
from madara_cli.tables.builders.main import table9
from madara_cli.tables.builders.routing import table19
from madara_cli.tables.render import write_tables
from tests.results_fixtures import write_cell, write_probe


def _nf_cfl(df):
    return df[df["Model"] == "Llama-3.1-8B"].iloc[0]["NF CFL"]


def test_table9_routes_on_the_calibration_nf_unless_full_is_asked(tmp_path):
    write_cell(tmp_path, "table2", "llama-3.1-8b", "conflicts", "nf", range(5))  # 50% on the evaluated set
    write_probe(tmp_path, "llama-3.1-8b", "conflicts", em_nf=0.2)  # 20% on the calibration queries
    write_cell(tmp_path, "table2", "llama-3.1-8b", "fever", "nf", range(9))  # no probe: falls back

    default = table9(load_results(tmp_path))
    assert _nf_cfl(default).startswith("20.0 / 13.9")
    note = next(n for n in default.attrs["notes"] if n.startswith("Routing NF"))
    assert "the RSC probe's NF on its calibration queries" in note and "--routing-nf calibration" in note
    assert "use the NF cell on the evaluated set instead" in note  # FEVER had no probe

    full = table9(load_results(tmp_path, routing_nf="full"))
    assert _nf_cfl(full).startswith("50.0 / 13.9")
    assert any(n.startswith("Routing NF = the NF cell on the evaluated set") for n in full.attrs["notes"])


def test_nf_only_routing_follows_the_named_source(tmp_path):
    # Calibration NF 20% (< τ 30%: PDE), evaluated-set NF 50% (3-Agent): the NF-only
    # policy's gap in Table 19 follows whichever the footnote names.
    g = "table2"
    write_probe(tmp_path, "llama-3.1-8b", "conflicts", em_nf=0.2)
    for strategy, right in (("nf", 5), ("pde", 8), ("three_agent", 6)):
        write_cell(tmp_path, g, "llama-3.1-8b", "conflicts", strategy, range(right))
    calibration = table19(load_results(tmp_path))
    full = table19(load_results(tmp_path, routing_nf="full"))
    gap = lambda df: df[(df["Model"] == "Llama-3.1-8B") & (df["Task"] == "Conflicts")].iloc[0]["NF-Only"]  # noqa: E731
    assert gap(calibration).startswith("0.0 /") and gap(full).startswith("20.0 /")


def test_unknown_routing_nf_source_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown routing NF source 'probe'; valid: calibration, full"):
        write_tables(tmp_path, tmp_path / "t", only=["table9"], routing_nf="probe")
