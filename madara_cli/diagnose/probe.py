"""The Diagnose arm: No-Filter calibration plus the RSC probe (paper Section 3, Appendix F) on
the calibration split (default the first 100 evaluated queries; ``benchmark.calibration_split=
disjoint`` holds them out):

1. **NF** -> EM_NF (the only step needing gold answers).
2. **Normal CoT scores**: the Relevance Assessor's CoT prompt scores every retrieved document
   with five reasoning steps (the ``cot`` strategy's requests, shared through the cache).
3. **Perturb** each chain three ways (perturb.perturb_chains).
4. **Re-score** each document given each perturbed chain, as ``rsc.rescore`` names (F.1 says
   only that the chain "is presented as-is to the scoring prompt"): ``forced`` (default, the
   authors' code; :func:`madara_cli.agents.requests.forced_rescore_request`) is a request of
   its own: the system turn says the document was analysed and the score must come from that
   analysis, the user turn holds the question, the document (first 2,000 characters) and the
   chain between markers, the reply is ``{"score": N, "confidence": C}``, no assistant prefix;
   ``prefix`` (:func:`madara_cli.agents.requests.rescore_request`) is the normal CoT request
   with the chain begun as the model's own JSON reply (``{"reasoning_steps": [...],
   "confidence": ``), so only the chain differs. Only the score is read: generated at the
   model's temperature (the paper's), or with ``rsc.rescoring=logprob`` the expected digit
   after the score key in one forward pass.
5. **Statistics** (rsc.summarize_probe), then the route (router.route).

``rsc.isolation_probe=true`` (needed by ``router.policy=isolation``) also runs PDE-Random (k
random documents each answered alone) and records its gain over NF with an exact McNemar test
(``isolation`` in probe.json; madara's extension, README "Beyond the paper").

A reply without ``reasoning_steps`` (small models skip them) gives its text less score and
confidence fields as the chain (:func:`madara_cli.diagnose.perturb.chain_from_text`, so its own
``"score": N`` does not ride into the shuffled level), counted in
``scores.chains_from_raw_text``; a chain empty after that leaves the probe, normal and
re-scored alike (``scores.chains_empty``). ``scores.cot_cut_at_max_tokens`` counts CoT replies
stopped at ``generation.cot_max_tokens`` (512, as the authors allow).

All calls go through the response cache (re-probing is free); the store writes a probe once,
to ``results/probes/<model>__<benchmark>__n<N>__<hash>/``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from madara_cli.agents.matrix import ragged
from madara_cli.agents.parsing import ParsedScore, parse_completion, parse_score, parse_score_authors, read_reply, read_rescore
from madara_cli.agents.prompts import EMPTY_CHAIN_PLACEHOLDER, RELEVANCE
from madara_cli.agents.requests import SCORING_MODES, agent_request
from madara_cli.backends.cache import CachedLLM
from madara_cli.composition import strategy_node
from madara_cli.config.folders import prompts_of
from madara_cli.config.keys import isolation_on
from madara_cli.config.prompt_sets import PromptSet
from madara_cli.config.schema import Rescore
from madara_cli.config.settings import Node, Settings
from madara_cli.core import metrics as M
from madara_cli.core.errors import ConfigError, DataError
from madara_cli.core.records import ChatRequest, Example
from madara_cli.diagnose import perturb, router, rsc
from madara_cli.results.outputs import Calibration, IsolationProbe, ProbeRecord, ProbeScores, timing_section
from madara_cli.results.probe_stats import ProbeStats

if TYPE_CHECKING:
    from madara_cli.config.identity import ProbeIdentity

log = logging.getLogger(__name__)

RESCORE_READINGS = tuple(Rescore.__members__)  # forced, prefix (rsc.rescore)
ISOLATION_STRATEGY = "pde_random"


def _cot_request(ex: Example, i: int, cfg: Settings, prompts: PromptSet | None = None) -> ChatRequest:
    """The Relevance Assessor's CoT request, built as the strategies build theirs (the ``cot`` strategy shares cached chains)."""
    return agent_request(
        ex, ex.docs or (), i, RELEVANCE, cot=True, mode="generate",
        max_tokens=int(cfg.generation.cot_max_tokens), temperature=float(cfg.model.temperature), seed=int(cfg.seed),
        prompts=prompts_of(cfg) if prompts is None else prompts,
    )


def run_probe(cfg: Settings, llm: CachedLLM, *, examples: Sequence[Example], spec: ProbeIdentity) -> ProbeRecord:
    """The probe record, without provenance, of NF + RSC on the retrieved calibration
    ``examples`` (:func:`madara_cli.experiment.examples.prepare_probe`); ``accounting`` counts
    its calls alone on a shared engine. ``spec``: :func:`~madara_cli.config.identity.identify_probe`."""
    if cfg.rsc.rescoring not in SCORING_MODES:
        raise ConfigError(f"unknown rsc.rescoring '{cfg.rsc.rescoring}'; valid: {', '.join(SCORING_MODES)}")
    if str(cfg.rsc.get("rescore", "forced")) not in RESCORE_READINGS:
        raise ConfigError(f"unknown rsc.rescore '{cfg.rsc.rescore}'; valid: {', '.join(RESCORE_READINGS)}")
    t0 = time.perf_counter()
    examples = list(examples)
    if len(examples) < 2:
        # DataError (a ValueError): one line on every path, `madara run strategy=madara` too
        raise DataError(f"the RSC probe needs at least 2 calibration queries, got {len(examples)}")
    with llm.fresh_accounting(propagate=True) as accounting:
        record = _probe(cfg, llm, spec, examples)
    counts = accounting.to_dict()
    # timing apart, so the rest of the record compares byte for byte between runs
    timing = timing_section(counts, time.perf_counter() - t0)
    return replace(record, accounting=counts, timing=timing)


@dataclass
class _Chains:
    """Step 2's outcome: every (query, document) pair's normal CoT score and its chain."""

    pairs: list[tuple[Example, int]]
    lengths: list[int]
    requests: list[ChatRequest]
    outs: list[Any]
    parsed: list[ParsedScore]
    chains: list[Any]
    included: list[bool]  # a pair with no reasoning left has nothing to perturb: it leaves the probe
    normal: list[float]


def _normal_chains(cfg: Settings, llm: CachedLLM, examples: list[Example], prompts: PromptSet, reading: Any) -> _Chains:
    """2. Normal CoT relevance scores and their chains: one batched stage."""
    pairs = [(ex, i) for ex in examples for i in range(len(ex.docs or ()))]
    requests = [_cot_request(ex, i, cfg, prompts) for ex, i in pairs]
    outs = llm.chat("rsc-cot", requests)
    if str(reading.get("score_parser", "madara")) == "authors":
        parsed = [parse_score_authors(c.text) for c in outs]
    else:
        parsed = [parse_score(c.text, RELEVANCE) for c in outs]
    if str(reading.get("chain_source", "steps")) == "field":
        chains: list[perturb.Reasoning] = [perturb.chain_from_field(c.text) for c in outs]
    else:
        chains = [list(p.reasoning) if p.reasoning else perturb.chain_from_text(c.text) for p, c in zip(parsed, outs)]
    # such a pair leaves with its normal score too (every correlation over the same pairs);
    # reading.empty_chain=placeholder re-scores it with a placeholder
    placeholder = str(reading.get("empty_chain", "drop")) == "placeholder"
    included = [placeholder or bool(perturb.steps_of(chain)) for chain in chains]
    normal = [p.value if keep else math.nan for p, keep in zip(parsed, included)]
    return _Chains(pairs, [len(ex.docs or ()) for ex in examples], requests, outs, parsed, chains, included, normal)


def _rescored(cfg: Settings, llm: CachedLLM, c: _Chains, prompts: PromptSet, reading: Any) -> tuple[list[int], list, list[ParsedScore]]:
    """3-4. (pairs probed, re-scores per level, every re-score read), all levels in one batched stage."""
    mode, how = str(cfg.rsc.rescoring), str(cfg.rsc.get("rescore", "forced"))
    from_field = str(reading.get("chain_source", "steps")) == "field"
    placeholder = str(reading.get("empty_chain", "drop")) == "placeholder"
    levels = perturb.perturb_chains(
        ragged(c.chains, c.lengths), seed=int(cfg.seed), contradiction=str(reading.get("contradiction", "paper")),
        shuffle=str(reading.get("shuffle", "changed")), empty_chain=str(reading.get("empty_chain", "drop")), resplit=not from_field,
    ).by_level()
    budget = int(cfg.generation.get("rescore_max_tokens") or cfg.generation.score_max_tokens)
    todo = [p for p, keep in enumerate(c.included) if keep]
    # reading.requests=authors: no stop string on the forced re-score, the document and
    # the steps as the authors' code shows them (an empty chain as the placeholder alone)
    shape = str(reading.get("requests", "madara"))
    fill = [] if shape == "authors" and how == "forced" else [EMPTY_CHAIN_PLACEHOLDER]
    flat_levels = [[steps or (fill if placeholder else steps) for row in level for steps in row] for level in levels]
    requests = [
        perturb.perturbed_rescore_request(c.pairs[p], c.requests[p], flat[p], c.parsed[p].confidence, mode, how, budget, prompts, shape)
        for flat in flat_levels
        for p in todo
    ]
    parser = str(reading.get("score_parser", "madara"))
    if mode == "logprob":
        read = [read_reply(r, RELEVANCE, mode)[0] for r in llm.logprobs("rsc-rescore", requests)]
    elif how == "prefix":  # a continuation of the begun object, read as its rest by either parser
        read = [read_rescore(r, RELEVANCE, parser) for r in llm.chat("rsc-rescore", requests)]
    elif parser == "authors":
        read = [parse_score_authors(r.text) for r in llm.chat("rsc-rescore", requests)]
    else:
        read = [parse_completion(r, RELEVANCE) for r in llm.chat("rsc-rescore", requests)]
    per_level = []
    for k in range(3):
        values = [math.nan] * len(c.pairs)
        for p, score in zip(todo, read[k * len(todo) : (k + 1) * len(todo)]):
            values[p] = score.value
        per_level.append(ragged(values, c.lengths))
    return todo, per_level, read


def _probe(cfg: Settings, llm: CachedLLM, spec: ProbeIdentity, examples: list[Example]) -> ProbeRecord:
    from madara_cli.strategies import StrategyContext, strategy_fn

    ctx = StrategyContext(llm=llm, cfg=cfg)
    reading = cfg.get("reading") or {}
    # 1. No-Filter EM on the calibration queries.
    nf_correct = _correct(strategy_fn("nf")(ctx, examples), examples, tidy=str(reading.get("answers", "tidy")) == "tidy")
    em_nf = 100.0 * float(np.mean(nf_correct))
    isolation = _isolation(cfg, llm, examples, nf_correct, strategy_node(ISOLATION_STRATEGY)) if isolation_on(cfg) else None
    c = _normal_chains(cfg, llm, examples, ctx.prompts, reading)
    todo, per_level, rescored = _rescored(cfg, llm, c, ctx.prompts, reading)
    # 5. Statistics and the route.
    stats = rsc.summarize_probe(
        ragged(c.normal, c.lengths), per_level, seed=int(cfg.seed), n_resamples=int(cfg.rsc.bootstrap),
        undefined_rho=str(reading.get("undefined_rho", "degenerate")),
    )
    diag = router.Diagnostics.from_probe(em_nf, stats)
    decision = router.route(diag)
    if isolation is not None:
        routed = router.route_isolation(diag, router.Isolation(**{k: isolation[k] for k in _ISOLATION_FIELDS}), _thresholds(cfg))
        isolation.update(route=routed.strategy, reason=routed.reason)
    failures = [sum(1 for p in group if not p.ok) for group in (c.parsed, rescored)]
    scores = ProbeScores(
        normal=_json_floats(c.normal), parse_failures_normal=failures[0], parse_failures_rescored=failures[1], n_pairs=len(c.pairs),
        chains_from_raw_text=sum(1 for p in c.parsed if not p.reasoning), chains_empty=len(c.pairs) - len(todo),
        n_pairs_probed=len(todo), cot_cut_at_max_tokens=sum(1 for o in c.outs if o.finish_reason == "length"),
    )
    calibration = Calibration(n=len(examples), split=str(cfg.benchmark.get("calibration_split", "nested")),
                              rule=f"first {spec.n} queries of the seeded order (seed {int(cfg.seed)})")
    return ProbeRecord(
        model=spec.model, benchmark=spec.benchmark, n=len(examples), key=spec.key, config_hash=spec.config_hash,
        **{name: getattr(stats, name) for name in ProbeStats.names()},
        em_nf=em_nf / 100.0, route=decision.strategy, reason=decision.reason, scores=scores, calibration=calibration,
        rescore=str(cfg.rsc.get("rescore", "forced")), rescoring=str(cfg.rsc.rescoring),
        isolation=None if isolation is None else IsolationProbe(**isolation),
    )


_ISOLATION_FIELDS = ("em_nf", "em_iso", "n", "p_value", "b", "c", "source")


def _correct(preds, examples: Sequence[Example], tidy: bool = True) -> list[bool]:
    """Per-query correctness under the paper tables' EM, in example order."""
    return [bool(M.exact_match(p.answer, ex.answers, tidy=tidy)) for p, ex in zip(preds, examples)]


def _thresholds(cfg: Settings) -> router.Thresholds:
    node = cfg.get("router") or {}
    return router.Thresholds(iso_alpha=float(node.get("iso_alpha", 0.05)), iso_min_gain=float(node.get("iso_min_gain", 0.0)))


def _isolation(cfg: Settings, llm: CachedLLM, examples: list[Example], nf_correct: list[bool], node: Node) -> dict[str, Any]:
    """PDE-Random as shipped (``node``; model, generation and seed the probe's) against NF on
    the calibration queries: the isolation gain, its exact McNemar test and its calls."""
    from madara_cli.strategies import StrategyContext, strategy_fn

    iso_cfg = cfg.replace(strategy=node)
    with llm.fresh_accounting(propagate=True) as accounting:
        preds = strategy_fn(str(node.name))(StrategyContext(llm=llm, cfg=iso_cfg), examples)
    measured = router.Isolation.from_outcomes(nf_correct, _correct(preds, examples))
    return {
        "strategy": str(node.name), "top_k": int(node.top_k), "em_nf": measured.em_nf, "em_iso": measured.em_iso,
        "gain": measured.gain, "n": measured.n, "b": measured.b, "c": measured.c, "p_value": measured.p_value,
        "test": "exact McNemar, two-sided", "source": measured.source, "requests": accounting.total().requests,
    }


def routed(record: ProbeRecord, cfg: Settings) -> tuple[str, str]:
    """(strategy, reason) of a finished probe under ``router.policy``: its own route for the
    paper's policy, else the isolation route (a probe without that measurement cannot)."""
    policy = str((cfg.get("router") or {}).get("policy", router.PAPER))
    if policy == router.PAPER:
        return str(record.route), str(record.reason)
    iso = record.isolation
    if iso is None or iso.route is None:
        raise ConfigError(
            f"router.policy={policy} needs the isolation probe, and {record.path or 'the probe'} was run without it "
            "(rerun the probe with rsc.isolation_probe=true)"
        )
    return str(iso.route), str(iso.reason)


def _json_floats(values: Sequence[float]) -> list[float | None]:
    return [None if (v is None or math.isnan(v)) else round(float(v), 4) for v in values]


def finished_probe(cfg: Settings, spec: ProbeIdentity) -> ProbeRecord | None:
    """The finished probe ``spec`` names, or one under an older key whose record shows the same
    inputs (SHIMS ``content_keyed_inputs``; one that cannot is said in one line, unused); None."""
    from madara_cli.config.keys import standing
    from madara_cli.data.splits import warn
    from madara_cli.results.record_files import probe_path, read_probe

    done = read_probe(spec.folder(cfg.results_dir))
    if done is not None:
        return done
    for old in spec.legacy:
        record = read_probe(old.folder(cfg.results_dir))
        if record is None:
            continue
        why = standing(record.provenance, spec.evidence)
        if why is None:
            log.info("probe %s: finished earlier under its key before inputs were keyed by content, %s", spec.key, old.key)
            return replace(record, path=probe_path(old.folder(cfg.results_dir)))
        warn(f"probes/{old.key} was finished before inputs were keyed by content, and {why}: the probe runs anew as {spec.key}")
    return None


def find_or_run_probe(cfg: Settings, llm: CachedLLM, *, examples: Sequence[Example], spec: ProbeIdentity,
                      force: bool = False) -> tuple[ProbeRecord, Path, bool]:
    """(record, its file, reused): the finished probe ``spec`` names
    (:func:`~madara_cli.config.identity.identify_probe`: key, older keys, arms, ``n``), or run
    now on the calibration ``examples`` (:func:`madara_cli.experiment.walk.ensure_probe` loads them)."""
    from madara_cli.results.prompt_log import prompt_renderer, write_prompts
    from madara_cli.results.provenance import now_iso, provenance
    from madara_cli.results.record_files import probe_path, write_probe

    folder = spec.folder(cfg.results_dir)
    if not force and (done := finished_probe(cfg, spec)) is not None:
        return done, Path(done.path) if done.path else probe_path(folder), True
    t0, started = time.perf_counter(), now_iso()
    with llm.logging_samples(bool(cfg.get("log_samples", True))) as samples:
        record = run_probe(cfg, llm, examples=examples, spec=spec)
    probe = replace(record, provenance=provenance(cfg, started, now_iso(), time.perf_counter() - t0, engine=llm.backend))
    folder.mkdir(parents=True, exist_ok=True)
    if cfg.get("log_samples", True):
        write_prompts(folder, samples, prompt_renderer(llm.backend))
    path = write_probe(folder, probe)
    return replace(probe, path=path), path, False
