"""The openai backend's client-side chat template and token counts, as the server will see
them: from the GGUF (what a llama.cpp server renders) or the HF tokenizer (``vllm serve``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from madara_cli.backends.chat import ChatSettings, ControlText, hf_control_strings, hf_encode_text, safe_token_ids
from madara_cli.config.settings import Settings
from madara_cli.core import hub
from madara_cli.core.errors import BackendError
from madara_cli.core.records import Message


class PromptTokenizer(Protocol):
    """The model's chat template and token counts, as the server will see them."""

    def render(self, messages: Sequence[Message]) -> str:
        """Chat template with the generation prompt, without a leading BOS string."""

    def count(self, text: str) -> int:
        """Tokens the server will feed the model for ``text`` (BOS included)."""

    def holds_control(self, texts: Sequence[str]) -> bool:
        """Whether any of ``texts`` holds a special-token string of the vocabulary."""

    def token_ids(self, messages: Sequence[Message], prefix: str = "") -> list[int]:
        """The whole prompt (BOS, rendering, prefix) as the ids the model must see, control tokens from the template alone."""


def message_dicts(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Messages as the JSON objects a chat template (and ``/chat/completions``) takes."""
    return [{"role": m.role, "content": m.content} for m in messages]


class _Rendering:
    """What both tokenizers share: the rendering less the leading BOS string the server adds again
    (so the model sees what the server's own chat rendering gives), and control text kept as text.
    Each gives ``_full`` (the rendering) and ``_encode`` (ids without BOS; special tokens parsed or not)."""

    chat: ChatSettings
    _added_bos: str
    _control: ControlText

    def render(self, messages: Sequence[Message]) -> str:
        text = self._full(messages)
        return text[len(self._added_bos) :] if self._added_bos and text.startswith(self._added_bos) else text

    def holds_control(self, texts: Sequence[str]) -> bool:
        return any(self._control.holds(t) for t in texts)

    def token_ids(self, messages: Sequence[Message], prefix: str = "") -> list[int]:
        pieces = [m.content for m in self.chat.conversation(messages)] + [prefix]
        return safe_token_ids(self._full(messages) + prefix, pieces, self._control, lambda t: self._encode(t, True),
                              lambda t: self._encode(t, False))


class GGUFTokenizer(_Rendering):
    """A GGUF's template and vocabulary (loaded without weights), rendered as llama-cpp-python's server does."""

    def __init__(self, gguf: str, chat: ChatSettings | None = None):
        self.chat = chat or ChatSettings()
        try:
            import llama_cpp
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise BackendError("llama-cpp-python is needed to read the GGUF's chat template: pip install -e '.[cpu]'") from None
        from madara_cli.backends.weights import resolve_gguf

        path = resolve_gguf(gguf)
        with _without_context_warning():
            try:
                self._llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
            except ValueError as e:  # "Failed to load model from file"
                raise BackendError(f"llama.cpp cannot read the vocabulary of {path}: {e}") from None
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise BackendError(f"{path.name} carries no chat template in its metadata")
        model = self._llm._model
        bos = model.token_get_text(self._llm.token_bos()) if self._llm.token_bos() >= 0 else ""
        self._format = Jinja2ChatFormatter(template=template, eos_token=model.token_get_text(self._llm.token_eos()), bos_token=bos)
        # Only a BOS the server will add again may be removed (SmolLM2's BOS is the
        # <|im_start|> that opens every turn, and is never added).
        self._added_bos = bos if model.add_bos_token() else ""
        from madara_cli.backends.llamacpp import control_strings

        self._control = ControlText(control_strings(self._llm))

    def _full(self, messages: Sequence[Message]) -> str:
        return self._format(messages=message_dicts(self.chat.conversation(messages)), **self.chat.template_kwargs).prompt

    def _encode(self, text: str, special: bool) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def count(self, text: str) -> int:
        # add_bos follows the GGUF's add_bos_token flag, as the server's tokenisation does
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))

    def close(self) -> None:
        self._llm.close()


@contextmanager
def _without_context_warning() -> Iterator[None]:
    """Drop the ``n_ctx_train (0) -- possible training context overflow`` line every vocabulary-only
    load logs at error level (no weights, no training context); every other goes to llama-cpp-python's."""
    import ctypes

    import llama_cpp

    try:
        from llama_cpp import _logger
    except ImportError:  # another layout of the bindings: leave its logging alone
        yield
        return
    library = _logger.llama_log_callback

    @llama_cpp.llama_log_callback
    def without_overflow_warning(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        if b"n_ctx_train (0)" not in (text or b""):
            library(level, text, user_data)

    llama_cpp.llama_log_set(without_overflow_warning, ctypes.c_void_p(0))
    try:
        yield
    finally:
        llama_cpp.llama_log_set(library, ctypes.c_void_p(0))


class HFTokenizer(_Rendering):
    """Template and vocabulary of a Hugging Face tokenizer (what ``vllm serve`` uses)."""

    def __init__(self, hf_id: str, revision: str = "main", chat: ChatSettings | None = None):
        self.chat = chat or ChatSettings()
        self._tok = _hf_tokenizer(hf_id, revision)
        bos_id = self._tok.bos_token_id
        adds_bos = bos_id is not None and self._tok("x", add_special_tokens=True)["input_ids"][:1] == [bos_id]
        self._added_bos = self._tok.bos_token if adds_bos else ""
        self._control = ControlText(hf_control_strings(self._tok))

    def _full(self, messages: Sequence[Message]) -> str:
        conversation = message_dicts(self.chat.conversation(messages))
        return self._tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True, **self.chat.template_kwargs)

    def _encode(self, text: str, special: bool) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False)) if special else hf_encode_text(self._tok, text)

    def count(self, text: str) -> int:
        return len(self._tok(text, add_special_tokens=True)["input_ids"])


def _hf_tokenizer(hf_id: str, revision: str) -> Any:
    """The tokenizer of ``hf_id@revision``. Without the hub (``HF_HUB_OFFLINE``, or a 3-second
    probe) it is read from the local cache alone, and one not there is one line at once (the
    hub client would spend about 50 s in retries to fail the same way)."""
    local = Path(hf_id).expanduser().is_dir()
    offline = not local and (hub.offline_requested() or not hub.reachable())
    not_here = BackendError(f"cannot reach the Hugging Face hub for the tokenizer of {hf_id}@{revision}, and it is not in the local cache "
                            "(the openai backend renders score prompts and counts tokens with it): fetch it where the hub is reachable, "
                            "or use a model with model.gguf (backend.tokenizer=gguf)")
    if offline and not (hub.cache_folder() / f"models--{hf_id.replace('/', '--')}").is_dir():
        raise not_here
    auto = _auto_tokenizer(hf_id)
    try:
        return auto.from_pretrained(hf_id, revision=revision, **({"local_files_only": True} if offline else {}))
    except Exception as e:  # noqa: BLE001 - offline, gated, unknown id: the user's to fix
        if offline:
            raise not_here from None
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise BackendError(f"cannot load the tokenizer of {hf_id}@{revision}: {first}") from None


def _auto_tokenizer(hf_id: str) -> Any:
    """transformers' AutoTokenizer, imported without its advice that PyTorch is missing
    (a tokenizer needs none; the line would be printed on every run without torch)."""
    import os

    saved = os.environ.get("TRANSFORMERS_NO_ADVISORY_WARNINGS")
    os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise BackendError(f"the openai backend renders score prompts and counts tokens client-side: pip install transformers "
                           f"(for the tokenizer of {hf_id}), or set model.gguf and backend.tokenizer=gguf") from None
    finally:
        if saved is None:
            os.environ.pop("TRANSFORMERS_NO_ADVISORY_WARNINGS", None)
        else:
            os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = saved
    return AutoTokenizer


def tokenizer_loader(cfg: Settings) -> Callable[[], PromptTokenizer]:
    """``backend.tokenizer``: ``gguf`` (model.gguf's template and vocabulary, what a llama.cpp
    server renders), ``hf`` (model.hf_id@revision's, what vllm serve uses), or null: gguf when the model has one."""
    choice = cfg.backend.get("tokenizer") or ("gguf" if cfg.model.get("gguf") else "hf")
    chat = ChatSettings.from_model(cfg.model)
    if choice == "gguf":
        if not cfg.model.get("gguf"):
            raise BackendError(f"backend.tokenizer=gguf but model {cfg.model.name} has no model.gguf")
        gguf = str(cfg.model.gguf)
        return lambda: GGUFTokenizer(gguf, chat)
    if choice == "hf":
        hf_id, revision = str(cfg.model.hf_id), str(cfg.model.revision)
        return lambda: HFTokenizer(hf_id, revision, chat)
    raise BackendError(f"unknown backend.tokenizer '{choice}'; valid: gguf, hf (or null)")
