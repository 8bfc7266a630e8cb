"""The Hugging Face hub as this machine sees it, without loading a library (offline mode asked,
the hub reachable by a bounded TCP connect, its local cache, a revision's commit there): data,
engines and retrievers ask alike."""

from __future__ import annotations

import os
import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from madara_cli.core.held import held

PROBE_TIMEOUT_S = 3.0
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def offline_requested() -> bool:
    """``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set."""
    return _truthy("HF_HUB_OFFLINE") or _truthy("HF_DATASETS_OFFLINE")


def reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """A TCP connect to ``HF_ENDPOINT`` within ``timeout``, even when name resolution hangs;
    behind a proxy we cannot tell, so yes (the library tries)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    ok: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)


def connectivity_error(e: BaseException) -> bool:
    """Whether a library's exception says the hub could not be reached."""
    names = {c.__name__ for c in type(e).__mro__}
    if names & {"ConnectionError", "OfflineModeIsEnabled", "LocalEntryNotFoundError", "TimeoutError", "ConnectError", "ReadTimeout"}:
        return True
    text = str(e)
    return any(s in text for s in ("Couldn't reach", "offline mode", "Name or service not known", "Temporary failure in name resolution"))


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return " ".join(text[0].split()) if text else type(e).__name__


def cache_folder() -> Path:
    """The local hub cache (``HF_HUB_CACHE``, else ``$HF_HOME/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub"


@held
def resolved_revision(hf_id: str, revision: str, kind: str = "models") -> str | None:
    """The commit ``revision`` of ``hf_id`` names in the local hub cache (``kind``: ``models`` or
    ``datasets``; held while a plan holds its files); ``revision`` itself if a commit; None when
    unknown here (not downloaded, or a local folder)."""
    if COMMIT.match(revision or ""):
        return revision
    if not hf_id or Path(hf_id).expanduser().is_dir() or hf_id.count("/") != 1:
        return None
    ref = cache_folder() / f"{kind}--{hf_id.replace('/', '--')}" / "refs" / revision
    try:
        commit = ref.read_text().strip()
    except OSError:
        return None
    return commit if COMMIT.match(commit) else None
