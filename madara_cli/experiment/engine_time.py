"""What an engine call costs in seconds, for ``madara plan``, and where the figures come from.

A call is priced ``call_s + prompt_tokens * prefill_s + output_tokens * decode_s``: prompt
tokens are the request's characters over the characters per token this engine's tokenizer
showed on answered requests (4, the rule of thumb for English BPE, before any); output
tokens are a chat request's ``max_tokens`` times the share of that budget its replies used
(the whole budget, an upper bound, before any reply); a score request reads one token.

The rates come from the first of these that exists for the engine (its cache fingerprint),
and the plan says which:

1. ``--rate`` calls per second from the command line (every call alike);
2. **measured here**: a least-squares fit (coefficients >= 0) of each completion's seconds on
   its prompt and output tokens over this engine's timed completions in the response cache
   (llama.cpp and OpenAI-compatible servers time each, vLLM shares a batch's seconds), one fit
   per kind of request (generation; a score's next-token read): they run different engine
   code, and a fit over both misprices each;
3. **madara bench --only vllm** on this fingerprint (``<results>/bench/vllm.json``: a
   prefill-only and a full pass of the same requests);
4. a **prior** for engine and hardware (:data:`PRIORS`), published or measured figures named
   with their source, scaled to ``model.params_b``: labelled a prior, never a measurement;
5. nothing (a served model behind ``backend=openai``: its hardware is not known here).
"""

from __future__ import annotations

import functools
import itertools
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from madara_cli.config.settings import Settings

CHARS_PER_TOKEN = 4.0  # before any reply was seen: the usual rule of thumb for English BPE
MIN_TIMED_CALLS = 3  # completions a fit needs before it is trusted over a prior


@dataclass(frozen=True)
class Rates:
    """Seconds per prompt token, per output token and per call."""

    prefill_s: float
    decode_s: float
    call_s: float = 0.0

    def seconds(self, calls: float, prompt_tokens: float, output_tokens: float) -> float:
        return calls * self.call_s + prompt_tokens * self.prefill_s + output_tokens * self.decode_s

    def scaled(self, factor: float) -> "Rates":
        """The same rates on a machine ``factor`` times slower."""
        return Rates(self.prefill_s * factor, self.decode_s * factor, self.call_s * factor)


@dataclass(frozen=True)
class Prior:
    """Throughput an engine reaches on some hardware for a model of ``params_b`` billion parameters, and its source."""

    engine: str
    hardware: str
    params_b: float
    prefill_tps: float  # prompt tokens per second
    decode_tps: float  # output tokens per second (batched where the engine batches)
    source: str
    call_s: float = 0.0

    def rates(self, params_b: float | None) -> Rates:
        """The rates scaled linearly to a model of ``params_b`` (the weights read and multiplied per
        token); the reference model's when its size is unknown."""
        scale = (params_b / self.params_b) if params_b else 1.0
        return Rates(prefill_s=scale / self.prefill_tps, decode_s=scale / self.decode_tps, call_s=self.call_s)


# The priors, each figure with its source (docs/benchmarks.md lists them too). Rates scale
# linearly with model.params_b from the model each figure was taken on.
PRIORS: dict[tuple[str, str], Prior] = {
    # llama.cpp on the CPU: this project's own measurement (the plan cost bench's
    # calibration run, a least-squares fit over its completions): SmolLM2-135M-Instruct
    # Q4_1, llama-cpp-python 0.3.36 portable AVX2 build, 2 shared cores, n_threads default.
    ("llamacpp", "cpu"): Prior(
        "llama.cpp", "CPU (2 AVX2 cores)", 0.135, prefill_tps=1150.0, decode_tps=60.0, call_s=0.05,
        source="measured by this project: SmolLM2-135M Q4_1 on 2 shared AVX2 cores, llama.cpp 0.3.36 "
               "(docs/benchmarks.md, madara bench --only plan)"),
    # vLLM's CPU build (docs/vllm.md, `madara bench --only vllm`, 2 AVX2 cores, SmolLM2-135M
    # float32, prefix caching off): 0.00095 s per prompt token (prefill alone), 0.0031 per output token.
    ("vllm", "cpu"): Prior(
        "vLLM (CPU build)", "CPU (2 AVX2 cores)", 0.135, prefill_tps=1 / 0.00095, decode_tps=1 / 0.0031,
        source="measured by this project: madara bench --only vllm, SmolLM2-135M float32 on 2 AVX2 cores (docs/vllm.md)"),
    # vLLM on GPUs: LambdaLabsML/vllm-benchmark, benchmark_v0.md ("Tensor Parallel v.s. Data
    # Parallel", vLLM 0.5.4, --num-prompts 320): Mistral-7B-Instruct-v0.3 (7.25B, bf16) 3,281
    # output tokens/s on 1xH100-80GB-SXM, 1,591 on 1xA100-80GB-SXM. No published prefill figure
    # was found: prefill is 3.3x the output rate, this project's vLLM prefill/decode ratio
    # (docs/vllm.md: 0.00095 vs 0.0031 s per token); a GPU's is likely faster, so it errs long.
    ("vllm", "H100"): Prior(
        "vLLM", "1xH100-80GB", 7.25, prefill_tps=3.3 * 3281.0, decode_tps=3281.0,
        source="LambdaLabsML/vllm-benchmark benchmark_v0.md: Mistral-7B-Instruct-v0.3 bf16, vLLM 0.5.4, 320 prompts, "
               "3,281 output tok/s; prefill at 3.3x that (this project's vLLM prefill/decode ratio, docs/vllm.md)"),
    ("vllm", "A100"): Prior(
        "vLLM", "1xA100-80GB", 7.25, prefill_tps=3.3 * 1591.0, decode_tps=1591.0,
        source="LambdaLabsML/vllm-benchmark benchmark_v0.md: Mistral-7B-Instruct-v0.3 bf16, vLLM 0.5.4, 320 prompts, "
               "1,591 output tok/s; prefill at 3.3x that (this project's vLLM prefill/decode ratio, docs/vllm.md)"),
}


@functools.lru_cache(maxsize=1)
def gpu_name() -> str | None:
    """The first GPU ``nvidia-smi`` lists, or None (no NVIDIA GPU or driver here)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []
    return names[0] if names else None


def prior_for(cfg: Settings) -> tuple[Prior, str] | None:
    """The prior for the cell's engine on this machine and what was assumed to pick it ("" if nothing); None without one."""
    backend = str(cfg.backend.name)
    if backend == "llamacpp":
        return PRIORS[("llamacpp", "cpu")], ""
    if backend != "vllm":
        return None
    from madara_cli.backends.vllm_backend import on_cpu_build

    if on_cpu_build():
        return PRIORS[("vllm", "cpu")], ""
    name = gpu_name()
    if name is None:
        return PRIORS[("vllm", "H100")], "no GPU seen here: assumed one H100"
    upper = name.upper()
    if "A100" in upper:
        return PRIORS[("vllm", "A100")], f"GPU {name}"
    if any(g in upper for g in ("H100", "H200", "GH200")):
        return PRIORS[("vllm", "H100")], f"GPU {name}"
    return PRIORS[("vllm", "A100")], f"GPU {name} is not in the table: an A100's figures"


def fit_rates(sums: dict[str, float]) -> Rates | None:
    """Seconds ~ call_s + prompt tokens * prefill_s + output tokens * decode_s, least squares over
    :meth:`~madara_cli.backends.cache.ResponseCache.timing_sums`: the best fit on any subset of the
    three terms whose coefficients are all >= 0; None under :data:`MIN_TIMED_CALLS` completions."""
    n = sums.get("n", 0.0)
    if n < MIN_TIMED_CALLS:
        return None
    gram = np.array([[n, sums["x"], sums["z"]], [sums["x"], sums["xx"], sums["xz"]], [sums["z"], sums["xz"], sums["zz"]]], dtype=float)
    rhs = np.array([sums["y"], sums["xy"], sums["zy"]], dtype=float)
    best: tuple[float, np.ndarray] | None = None
    for size in (1, 2, 3):
        for terms in itertools.combinations(range(3), size):
            idx = list(terms)
            sub = gram[np.ix_(idx, idx)]
            if not np.isfinite(np.linalg.cond(sub)) or np.linalg.cond(sub) > 1e12:  # a term the completions cannot tell apart
                continue
            beta = np.linalg.solve(sub, rhs[idx])
            if (beta < 0).any():
                continue
            sse = sums["yy"] - 2 * beta @ rhs[idx] + beta @ sub @ beta
            if best is None or sse < best[0] - 1e-12:
                full = np.zeros(3)
                full[idx] = beta
                best = (float(sse), full)
    if best is None:
        return None
    call_s, prefill_s, decode_s = (float(v) for v in best[1])
    return Rates(prefill_s=prefill_s, decode_s=decode_s, call_s=call_s)


def bench_rates(bench_dir: Path, fingerprint: str, prefix_caching: bool = True) -> tuple[Rates, int] | None:
    """Seconds per prompt and output token from ``madara bench --only vllm`` (``<results>/bench/vllm.json``,
    prefix caching as the cell runs), with the requests it timed; None if not run on this fingerprint."""
    from madara_cli.core.errors import DataError
    from madara_cli.core.sidefiles import read_json

    try:  # a side file like any other: cut, foreign or odd, it only means no measured rates
        over = read_json(bench_dir / "vllm.json", "the vLLM bench")["overhead"]
        timed = over["prefix_caching_on" if prefix_caching else "prefix_caching_off"]
        prefill, decode = float(timed["seconds_per_prompt_token"]), float(timed["seconds_per_output_token"])
        if over.get("fingerprint") != fingerprint or not (prefill > 0 and decode > 0):
            return None
        return Rates(prefill_s=prefill, decode_s=decode), int(over.get("requests") or 0)
    except (DataError, ValueError, KeyError, TypeError, AttributeError, OverflowError):
        return None


@dataclass
class Observed:
    """What the cached replies of a plan's requests show of this engine: characters per prompt token, share of each budget used."""

    chars: float = 0.0
    tokens_in: float = 0.0
    budget_used: dict[int, list[float]] = field(default_factory=dict)  # max_tokens -> [tokens out, replies]

    def add(self, chars: int, budget: int, kind: str, tokens_in: int, tokens_out: int) -> None:
        if tokens_in > 0:
            self.chars += chars
            self.tokens_in += tokens_in
        if kind == "chat" and budget > 0:
            used = self.budget_used.setdefault(budget, [0.0, 0.0])
            used[0] += min(tokens_out, budget)
            used[1] += 1

    @property
    def replies(self) -> int:
        return int(sum(n for _, n in self.budget_used.values()))

    def chars_per_token(self) -> float:
        return self.chars / self.tokens_in if self.tokens_in > 0 else CHARS_PER_TOKEN

    def fill(self, budget: int) -> float:
        """The share of a ``budget``-token reply generated: measured for that budget, else over all, else 1 (an upper bound)."""
        if budget in self.budget_used and self.budget_used[budget][1]:
            out, n = self.budget_used[budget]
            return out / (n * budget)
        total_out = sum(out for out, _ in self.budget_used.values())
        total_budget = sum(b * n for b, (_, n) in self.budget_used.items())
        return total_out / total_budget if total_budget else 1.0


@dataclass
class Calibration:
    """How one engine's calls are timed, and what that rests on."""

    engine: str  # the cache fingerprint
    label: str  # backend and model, for people
    source: str  # rate | measured | bench | prior | none
    rates: Rates | None
    basis: str  # one clause: what the figures rest on
    calls: int = 0  # completions the figures were measured on (measured, bench)
    observed: Observed = field(default_factory=Observed)
    per_call_s: float | None = None  # --rate: every call alike
    # measured: a fit per kind of request (chat: generation; score: one next-token read),
    # each priced by its own; a kind with too few timed completions uses ``rates`` (all kinds)
    by_kind: dict[str, Rates] = field(default_factory=dict)

    def seconds(self, kind: str, budget: int, calls: float, chars: float) -> float | None:
        """Seconds of ``calls`` uncached requests of one kind and budget, ``chars`` characters in all; None uncalibrated."""
        if self.per_call_s is not None:
            return calls * self.per_call_s
        rates = self.by_kind.get(kind, self.rates)
        if rates is None:
            return None
        prompt = chars / self.observed.chars_per_token()
        output = calls * (1.0 if kind == "score" else budget * self.observed.fill(budget))
        return rates.seconds(calls, prompt, output)

    def describe(self) -> str:
        """One line: which calibration, on what, with its figures."""
        if self.source == "rate":
            return f"{self.label}: {self.basis}"
        if self.rates is None:
            return f"{self.label}: no calibration ({self.basis}); est. time shows —: run a cell first, or pass --rate"
        figures = "; ".join(f"{KIND_NAMES[k]}: {_figures(r)}" for k, r in self.by_kind.items()) or _figures(self.rates)
        obs = self.observed
        if obs.replies:
            shares = ", ".join(f"{100 * obs.fill(b):.0f}% of {b}" for b in sorted(obs.budget_used))
            output = f"output tokens: {shares} (from {obs.replies:,} cached replies), {obs.chars_per_token():.1f} characters a token"
        else:
            output = "output tokens at their whole budget (an upper bound: no reply of these requests seen yet), 4 characters a token"
        return f"{self.label}: {self.basis} ({figures}); {output}"

    def to_dict(self) -> dict[str, Any]:
        r = self.rates
        by_kind = {k: {"prefill_tokens_per_s": _rate(v.prefill_s), "decode_tokens_per_s": _rate(v.decode_s), "seconds_per_call": round(v.call_s, 6)}
                   for k, v in self.by_kind.items()}
        return {
            "engine": self.engine, "label": self.label, "source": self.source, "basis": self.basis, "calls": self.calls,
            "prefill_tokens_per_s": None if r is None or not r.prefill_s else round(1 / r.prefill_s, 3),
            "decode_tokens_per_s": None if r is None or not r.decode_s else round(1 / r.decode_s, 3),
            "seconds_per_call": self.per_call_s if self.per_call_s is not None else (None if r is None else round(r.call_s, 6)),
            "chars_per_token": round(self.observed.chars_per_token(), 3),
            "output_share_of_budget": {str(b): round(self.observed.fill(b), 4) for b in sorted(self.observed.budget_used)},
            "replies_seen": self.observed.replies,
            "by_kind": by_kind,
        }


KIND_NAMES = {"chat": "generation", "score": "scores"}


def _rate(seconds: float) -> float | None:
    return None if not seconds else round(1 / seconds, 3)


def _figures(r: Rates) -> str:
    return f"prefill {_per_s(r.prefill_s)} tok/s, decode {_per_s(r.decode_s)} tok/s" + (f", {r.call_s:.2f} s a call" if r.call_s else "")


def _per_s(seconds: float) -> str:
    return "∞" if seconds <= 0 else f"{1 / seconds:,.0f}" if 1 / seconds >= 10 else f"{1 / seconds:.2g}"


def calibrate(cfg: Settings, fingerprint: str, cache: Any | None, rate: float | None = None) -> Calibration:
    """The calibration of the engine ``cfg`` runs on (see the module docstring for the order)."""
    label = f"{cfg.backend.name} {cfg.model.name}"
    if rate is not None:
        return Calibration(fingerprint, label, "rate", None, f"the given --rate {rate:g} calls/s", per_call_s=1.0 / rate)
    found = prior_for(cfg)
    params = cfg.model.get("params_b")
    prior = None if found is None else found[0].rates(float(params) if params else None)
    if cache is not None:
        sums = cache.timing_sums(fingerprint)
        fitted = fit_rates(sums)
        if fitted is not None:
            by_kind = {kind: r for kind in KIND_NAMES if (r := fit_rates(cache.timing_sums(fingerprint, kind))) is not None}
            basis = f"measured here over {int(sums['n']):,} calls in {cache.path}"
            missing = [k for k in KIND_NAMES if k not in by_kind]
            predicted = 0.0 if prior is None else prior.seconds(sums["n"], sums["x"], sums["z"])
            if missing and predicted > 0:  # a kind timed too few times: the prior, at the speed this machine showed on the rest
                factor = sums["y"] / predicted
                by_kind.update({k: prior.scaled(factor) for k in missing})
                basis += (f"; {' and '.join(KIND_NAMES[k] for k in missing)}: too few timed here, the prior at the speed measured "
                          f"(x{factor:.2g} its time)")
            return Calibration(fingerprint, label, "measured", fitted, basis, calls=int(sums["n"]), by_kind=by_kind)
    bench = bench_rates(Path(str(cfg.results_dir)) / "bench", fingerprint, bool(cfg.backend.get("enable_prefix_caching", True)))
    if bench is not None:
        rates, n = bench
        return Calibration(fingerprint, label, "bench", rates, f"from madara bench --only vllm ({n} requests, {cfg.results_dir}/bench/vllm.json)",
                           calls=n)
    if found is None:
        return Calibration(fingerprint, label, "none", None, f"nothing measured on this engine, and no prior for backend {cfg.backend.name}")
    assumed = found[1]
    size = f"scaled to {float(params):g}B parameters" if params else "model.params_b unknown: the reference model's rates"
    basis = (f"a prior, not measured here: {found[0].engine} on {found[0].hardware}" + (f" ({assumed})" if assumed else "")
             + f", {size}; source: {found[0].source}")
    return Calibration(fingerprint, label, "prior", prior, basis)
