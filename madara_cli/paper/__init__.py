"""Published numbers of the MADARA paper, transcribed exactly as printed. The tables
(:mod:`madara_cli.tables`, each cell beside the paper's value) and the audit
(:mod:`madara_cli.audit`, the paper checked against itself) both read them from here.

Source: *To Isolate or to Score? Model-Adaptive Assessment for Cost-Efficient
Multi-Agent RAG* (``paper/001_1ee2392c003a0c42.txt``), Tables 1-19. Table G.1 (Token
F1) is referenced by the paper but its values are not in the text: there is no entry
for it here.

Conventions
-----------
- Keys are ``(model, benchmark, column)`` with the config names used everywhere else
  (``llama-3.1-8b``, ``conflicts``, ``three_agent`` ...). Rows are written in the
  paper's own row order and flattened by :func:`~madara_cli.paper.study.flatten`, so each
  literal reads like the printed row.
- EM and F1 are in the units the paper prints (EM in %, F1 as printed: % in Table 6,
  a fraction in Table 7). Signed deltas keep their sign (+36.3 → 36.3, −0.5 → -0.5).
- Entries the paper prints as a dash are ``None``.
- Table 14 p-values are kept as the printed strings ("0.001", "2.4e-18") because
  their precision matters to the audit.

The values live by table in :mod:`.tables_1_9` and :mod:`.tables_10_19` (with the
appendix figures the text prints outside numbered tables); the labels, models, pairs,
query counts and thresholds every table shares in :mod:`.study`. This package gathers
them all, so ``from madara_cli import paper as pv; pv.TABLE2`` reads any of them.
"""

from __future__ import annotations

from madara_cli.paper.study import *  # noqa: F403
from madara_cli.paper.tables_1_9 import *  # noqa: F403
from madara_cli.paper.tables_10_19 import *  # noqa: F403

# Every published value (the upper-case names), the row type of Table 14 and the reader.
__all__ = sorted(name for name in dir() if name.isupper() or name in ("McNemarRow", "lookup"))
