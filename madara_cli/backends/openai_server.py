"""The openai backend's start-up probes of its server: which model ``/models`` lists for
it (refusing a server that plainly serves another) and what software and version answer."""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from madara_cli.backends.openai_replies import one_line, origin
from madara_cli.core.errors import BackendError

log = logging.getLogger("madara_cli.backends.openai_backend")

PROBE_TIMEOUT_S = 10.0  # the /models probe at start-up: a dead host should not hang a run
IDENTITY_TIMEOUT_S = 3.0  # each probe of the server's software and version (optional answers)


class Unreachable(BackendError):
    """Nothing listens at ``base_url`` (connection refused)."""


class HTTPStatus(BackendError):
    """The server answered with an error status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class ServerProbes:
    """What :class:`~madara_cli.backends.openai_backend.OpenAIBackend` learns of its server
    before the first request (it supplies ``_call`` and the attributes below)."""

    base_url: str
    _url: str
    model: str
    aliases: tuple[str, ...]
    timeout_s: float
    retries: int
    _call: Any

    def _names_the_model(self, name: str) -> bool:
        """Whether a name a server gives (in ``/models``, in a reply) is the model's: its name,
        a dated snapshot of it (``gpt-4o-mini-2024-07-18``), an alias or an alias's file name."""
        files = {a.rsplit("/", 1)[-1] for a in self.aliases}
        return name == self.model or name.startswith(self.model + "-") or name in self.aliases or name.rsplit("/", 1)[-1] in files

    def _served_model(self, require_listed: bool) -> dict[str, Any] | None:
        """The entry of ``/models`` naming the model; None without that endpoint. A server
        listing one other model is refused (so is one not listing ``backend.served_model_name``:
        ``require_listed``); one listing several, none the model, is warned about."""
        probe = {"timeout_s": min(self.timeout_s, PROBE_TIMEOUT_S), "retries": min(self.retries, 2)}
        try:
            listing = self._call("GET", "/models", **probe)
        except Unreachable:
            raise
        except HTTPStatus as e:
            if e.status == 404:
                self._check_v1()
            return None  # no /models endpoint: the fingerprint goes without it
        except BackendError:
            return None
        data = listing.get("data") if isinstance(listing, dict) else None
        models = [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]] if isinstance(data, list) else []
        ids = [m["id"] for m in models]
        shown = ", ".join(one_line(i, 120) for i in ids[:10]) + (f" (and {len(ids) - 10} more)" if len(ids) > 10 else "")
        if require_listed and ids and self.model not in ids:
            raise BackendError(f"backend.served_model_name={one_line(self.model, 120)!r} is not served at {self.base_url}; it serves: {shown}")
        mine = next((m for m in models if m["id"] == self.model), None) or next((m for m in models if self._names_the_model(m["id"])), None)
        if mine is not None or not models:
            return mine
        wanted = one_line(self.model, 120)
        if len(models) == 1:
            raise BackendError(f"{self.base_url} serves {shown}, not {wanted!r}: point backend.base_url at the server of {wanted!r}, "
                               f"or set backend.served_model_name={shown} if that is the same model")
        log.warning("%s lists %s, none of them %r: what answers is the server's choice (each cell records the model its replies name)",
                    self.base_url, shown, wanted)
        return models[0]

    def _check_v1(self) -> None:
        """``/models`` answered 404: when the server answers under ``/v1``, the base URL lacks it."""
        if urlsplit(self.base_url).path.rstrip("/").endswith("/v1"):
            return
        try:
            self._call("GET", "/v1/models", timeout_s=min(self.timeout_s, PROBE_TIMEOUT_S), retries=0)
        except BackendError:
            return
        raise BackendError(f"backend.base_url={self.base_url} has no /v1: the server answers at {self.base_url}/v1 "
                           f"(set backend.base_url={self.base_url}/v1)")

    def _identify(self, served: dict[str, Any] | None) -> dict[str, Any]:
        """What answers, as far as the server says: the model id and the software and version
        (vLLM: ``GET /version`` beside ``owned_by: vllm``; llama-server: ``GET /props``'
        ``build_info``; llama-cpp-python: its OpenAPI title and version). Each probe is
        optional and short; what none answers stays None."""
        parts = urlsplit(self._url)
        root = urlunsplit((parts.scheme, parts.netloc, re.sub(r"/v1/?$", "", parts.path), "", ""))
        owner = served.get("owned_by") if served else None
        out: dict[str, Any] = {"base_url": origin(self.base_url), "model_id": one_line(served["id"], 300) if served else None,
                               "software": None, "version": None}

        def probe(path: str) -> Any:
            try:
                return self._call("GET", path, timeout_s=min(self.timeout_s, IDENTITY_TIMEOUT_S), retries=0, url=root + path)
            except BackendError:
                return None

        version = probe("/version")
        if isinstance(version, dict) and isinstance(version.get("version"), str):
            out["software"] = one_line(owner, 60) if isinstance(owner, str) and owner else "unknown"
            out["version"] = one_line(version["version"], 60)
            return out
        props = probe("/props")
        if isinstance(props, dict) and isinstance(props.get("build_info"), str):
            out["software"], out["version"] = "llama.cpp-server", one_line(props["build_info"], 60)
            return out
        spec = probe("/openapi.json")
        info = spec.get("info") if isinstance(spec, dict) else None
        if isinstance(info, dict) and isinstance(info.get("title"), str) and isinstance(info.get("version"), str):
            title = info["title"]
            if "llama.cpp python" in title.lower():
                out["software"], out["version"] = "llama-cpp-python", one_line(info["version"], 60)
            elif title.strip() and title.strip() != "FastAPI":  # FastAPI's default title names nothing
                out["software"], out["version"] = one_line(title, 60), one_line(info["version"], 60)
        return out
