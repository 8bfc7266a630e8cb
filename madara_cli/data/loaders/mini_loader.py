"""``mini``: the offline benchmark :mod:`madara_cli.data.mini` generates (no file, no hub);
``benchmark.n_questions``, its own setting, is its size, and names its rows in every snapshot's key."""

from __future__ import annotations

from dataclasses import dataclass

from madara_cli.config.schema import BenchmarkConfig
from madara_cli.config.settings import Node
from madara_cli.core.records import Example
from madara_cli.data.loaders import LoaderSpec
from madara_cli.plugins import register
from madara_cli.plugins.shape import int_range


@dataclass
class MiniBenchmark(BenchmarkConfig):
    n_questions: int = 60  # questions generated


def load_mini(cfg: Node) -> list[Example]:
    from madara_cli.data.mini import generate

    return generate(n_questions=cfg.n_questions, seed=0)


def _mini_key(benchmark: Node) -> str:
    return f"mini:n{benchmark.n_questions}"  # the generator's size names its rows


SPEC = register(LoaderSpec(name="mini", load=load_mini, description="the offline mini benchmark madara generates itself (no download)",
                           key=_mini_key, offline="generated here", schema=MiniBenchmark, ranges={"n_questions": int_range(1)}))
