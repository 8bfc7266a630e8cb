"""The one truncation rule every backend applies to prompts that exceed the context:
prompts put the question after the documents, so the longest message is cut in its
middle (its head and its tail, where the question sits, survive; ``[...]`` marks the
cut), and the request is flagged ``truncated``. It never raises.
"""

from __future__ import annotations

from typing import Callable, Sequence

from madara_cli.core.records import Message

MARK = "\n[...]\n"


def fit_messages(
    messages: Sequence[Message], count_tokens: Callable[[Sequence[Message]], int], budget: int
) -> tuple[tuple[Message, ...], bool]:
    msgs = tuple(messages)
    n = count_tokens(msgs)
    if n <= budget:
        return msgs, False
    longest = max(range(len(msgs)), key=lambda i: len(msgs[i].content))
    text = msgs[longest].content
    for _ in range(8):  # shrink by the measured ratio, with a margin, until it fits
        keep = int(len(text) * budget / max(n, 1) * 0.95) - len(MARK)
        if keep <= 0:
            text = ""
        else:
            head = keep // 3
            text = text[:head] + MARK + text[len(text) - (keep - head) :]
        trial = msgs[:longest] + (Message(msgs[longest].role, text),) + msgs[longest + 1 :]
        n = count_tokens(trial)
        if n <= budget or not text:
            break
    return trial, True
