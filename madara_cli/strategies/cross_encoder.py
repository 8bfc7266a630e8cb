"""Cross-encoder reranking (the MADARA paper, Appendix K, Table 18).

A 33M-parameter MS MARCO cross-encoder (``strategy.cross_encoder``, default
``cross-encoder/ms-marco-MiniLM-L-12-v2``) scores each (question, document) pair;
the top-k go to the generator in descending order. It costs no LLM call besides the
final generation -- the paper puts it at ~40x cheaper than 3-Agent assessment.
Needs the ``dense`` extra (sentence-transformers) and the model weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from madara_cli.agents.matrix import ragged
from madara_cli.config.schema import StrategyConfig, input_field
from madara_cli.core.errors import BackendError, import_failure
from madara_cli.core.records import Example, Prediction
from madara_cli.plugins import int_range, register
from madara_cli.strategies.assessed import selection_report
from madara_cli.strategies.context import StrategyContext, StrategySpec, generate_answers, rounded, support_coverage, with_extra
from madara_cli.strategies.selection import top_k


@dataclass
class CrossEncoderConfig(StrategyConfig):
    top_k: int = 5
    cross_encoder: str = input_field("model", "cross-encoder/ms-marco-MiniLM-L-12-v2")  # a hub name or a local folder (keyed by content)

_MODELS: dict[str, Any] = {}


def _load(name: str) -> Any:
    if name not in _MODELS:
        try:
            from sentence_transformers import CrossEncoder
        except (ImportError, OSError) as e:
            raise BackendError(import_failure("the cross_encoder strategy", e, "sentence-transformers: pip install -e '.[dense]'")) from None
        try:
            _MODELS[name] = CrossEncoder(name)
        except Exception as e:  # noqa: BLE001 - download/format errors are the user's to fix
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise BackendError(f"could not load cross-encoder '{name}': {first}") from None
    return _MODELS[name]


def cross_encoder_scores(name: str, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """Relevance logits of (query, passage) pairs, one batched pass."""
    if not pairs:
        return np.zeros(0)
    model = _load(name)
    return np.asarray(model.predict(list(pairs), batch_size=64, show_progress_bar=False), dtype=float)


def cross_encoder_rerank(ctx: StrategyContext, examples: Sequence[Example]) -> list[Prediction]:
    st = ctx.settings_as(CrossEncoderConfig)
    name, k = st.cross_encoder, st.top_k
    pairs = [(ex.question, d.render()) for ex in examples for d in ex.docs or ()]
    scores = ragged(cross_encoder_scores(name, pairs), [len(ex.docs or ()) for ex in examples])
    picks = [top_k(s, k) for s in scores]
    selections = [[(ex.docs or ())[i] for i in idx] for ex, idx in zip(examples, picks)]
    preds = generate_answers(ctx, "generate", examples, selections)
    ctx.report["selection"] = selection_report(picks)
    ctx.report["cross_encoder"] = {"model": name}
    return [
        with_extra(p, ce_scores=rounded(s), selected=idx, **support_coverage(ex, p.doc_ids))
        for ex, p, s, idx in zip(examples, preds, scores, picks)
    ]


SPEC = register(StrategySpec(name="cross_encoder", schema=CrossEncoderConfig, run=cross_encoder_rerank, ranges={"top_k": int_range(1)},
                             extra="dense", description="Cross-encoder reranking (sentence-transformers), top-k kept"))
