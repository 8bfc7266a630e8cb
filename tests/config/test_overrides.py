"""Overrides are parsed once, by :func:`madara_cli.config.overrides.parse_overrides`:
what each record says is what every reader of overrides (compose, the verbs'
checks, grids, launchers, bench) relies on."""

from __future__ import annotations

import pytest

from madara_cli.composition import compose
from madara_cli.config.overrides import Override, last_value, malformed, parse_overrides
from madara_cli.core.errors import ConfigError


def test_key_value_and_prefix_are_split_at_the_first_equals_sign():
    plain, add, force, delete, nested, bare = parse_overrides(
        ["limit=3", "+strategy.scoring=logprob", "++seed=1", "~results_dir", "benchmark.path=a=b.jsonl", "model"]
    )
    assert (plain.key, plain.value, plain.prefix) == ("limit", "3", "")
    assert (add.key, add.value, add.prefix) == ("strategy.scoring", "logprob", "+")
    assert (force.key, force.prefix) == ("seed", "++")
    assert (delete.key, delete.value, delete.deletes) == ("results_dir", None, True)
    assert (nested.key, nested.value) == ("benchmark.path", "a=b.jsonl")
    assert (bare.key, bare.value) == ("model", None)
    assert [o.raw for o in (plain, add, force, delete, nested, bare)] == [
        "limit=3", "+strategy.scoring=logprob", "++seed=1", "~results_dir", "benchmark.path=a=b.jsonl", "model"]
    assert plain.hydra.value() == 3 and add.hydra.is_add() and delete.hydra.is_delete()


def test_hydra_settings_and_the_last_value_of_a_key():
    parsed = parse_overrides(["hydra.launcher.n_jobs=2", "hydra/launcher=joblib", "hydrant=1", "results_dir=a", "+results_dir=b"])
    assert [o.is_hydra_setting for o in parsed] == [True, True, False, False, False]
    assert last_value(parsed, "results_dir") == "b" and last_value(parsed, "cache") is None


def test_a_malformed_override_keeps_its_text_and_hydras_first_line():
    ok, bad = parse_overrides(["limit=2", "model=["])
    assert malformed([ok]) is None and malformed([ok, bad]) is bad
    assert bad.hydra is None and (bad.key, bad.value) == ("model", "[") and bad.error and "\n" not in bad.error
    with pytest.raises(ConfigError, match=r"^malformed override: "):
        compose(["limit=2", "model=["])


def test_a_tilde_path_says_to_write_it_out():
    """``backend.adapter=~/lora``: the shell leaves the ``~`` alone and Hydra refuses it;
    the one line says what to type instead."""
    with pytest.raises(ConfigError) as err:
        compose(["backend.adapter=~/lora"])
    assert "write the path out: backend.adapter=$HOME/lora" in str(err.value) and "\n" not in str(err.value)


def test_parsing_a_parsed_list_again_is_the_same_records():
    once = parse_overrides(["strategy=pde", "strategy.top_k=3"])
    again = parse_overrides(once)
    assert again == once and all(a is b for a, b in zip(again, once)) and all(isinstance(o, Override) for o in again)


def test_a_sweep_run_parses_each_override_text_once(monkeypatch, capsys, tmp_path):
    """``madara run -m`` reads its overrides in many rooms (the verb's checks, the grid's
    sweeps and applicability, compose and its checks, every cell): Hydra's grammar
    parses each distinct text once, and every reader shares the record."""
    from collections import Counter

    from madara_cli.config import overrides as mod
    from madara_cli.experiment import engines
    from tests.fakes import FakeBackend, cli

    monkeypatch.setattr(mod, "_PARSED", {})
    counts: Counter = Counter()
    real = mod._parse_one

    def spy(text):
        counts[text] += 1
        return real(text)

    monkeypatch.setattr(mod, "_parse_one", spy)
    monkeypatch.setattr(engines, "make_backend", lambda cfg: FakeBackend())
    monkeypatch.setattr(engines.EnginePool.__init__, "__defaults__", (None, lambda cfg: FakeBackend(), engines.ResponseCache))
    code, out, err = cli("run", "-m", "strategy=nf,sda", "benchmark=mini", "limit=2",
                                 f"results_dir={tmp_path / 'r'}", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert counts and max(counts.values()) == 1, {t: n for t, n in counts.items() if n > 1}
    assert "limit=2" in counts and "strategy=sda" in counts  # the cells' own texts were read through it


def test_a_plain_integer_override_is_the_record_hydras_grammar_makes():
    """``key=<int>`` is read without running Hydra's parser (a seed sweep's cells): the
    record is the grammar's own, value type included, for every text it takes; every other
    text (a sign, leading zeros, underscores, a float, a word, odd keys) goes to the parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from madara_cli.config.overrides import _plain_int, parse_overrides

    grammar = OverridesParser.create()
    taken = ["seed=3", "seed=0", "seed=-2", "seed=-0", "strategy.top_k=5", "a.b.c=12", "seed=999999999999999999", "true=1", "null=1",
             "nan=2", "inf=3", "_x=1", "x_1=4", "True=5", "int=3", "range=3", "choice=1", "hydra.job.chdir=1", "Q=7"]
    left = ["seed=+3", "x=00", "x=01", "x=-01", "x=1_000", "x=1e3", "x=1.0", "x=null", "x=true", "a..b=1", "a.=1", ".a=1", "x= 1",
            "x=1 ", "+x=1", "~x", "x-y=1", "x=1,2", "group@pkg=1", "seed=9999999999999999999"]
    for text in taken:
        mine = _plain_int(text)
        (hydra,) = grammar.parse_overrides([text])
        assert mine is not None and mine.hydra == hydra and type(mine.hydra._value) is type(hydra._value), text
        assert (mine.raw, mine.key, mine.value, mine.prefix, mine.error) == (text, hydra.key_or_group, text.split("=")[1], "", None)
    for text in left:
        assert _plain_int(text) is None, text
    assert parse_overrides(["seed=12"])[0].hydra.value() == 12
