"""The openai backend's HTTP transport: one pooled keep-alive client (httpx or httpx2) per
engine, no redirect followed (it would carry the ``Authorization`` header elsewhere), a
bounded body, and a deadline per attempt: httpx bounds each socket operation alone (a byte
a second never times out), so the pool's network backend clamps every connect, read and
write to what is left of it (through a proxy, it is checked as the body arrives)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from madara_cli.core.errors import BackendError

MAX_BODY_BYTES = 64 << 20  # far above any completion reply; a larger one is not a reply
KEEPALIVE_S = 60.0  # an idle connection is closed after this long


def http_modules() -> tuple[ModuleType, ModuleType]:
    """(httpx, httpcore): ``httpx2``/``httpcore2`` where installed, else ``httpx``/``httpcore``."""
    try:
        import httpcore2
        import httpx2
    except ImportError:
        try:
            import httpcore
            import httpx
        except ImportError:
            raise BackendError("the openai backend needs httpx: pip install httpx2 (Python >= 3.11) or httpx") from None
        return httpx, httpcore
    return httpx2, httpcore2


class Refused(Exception):
    """Nothing listens at the address (connection refused)."""


class Transient(Exception):
    """A failure another attempt may not meet: a timeout, a reset or cut connection."""


class Failed(Exception):
    """A failure another attempt would meet again (a malformed URL, a body too large)."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


_deadline = threading.local()  # .at: time.monotonic() by which the current attempt ends


def _time_left(timeout_error: type[Exception], timeout: float | None) -> float | None:
    at = getattr(_deadline, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise timeout_error("the attempt's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Streams:
    """Every connection the pool's backend has opened and not yet closed, so that closing the
    client ends them all, one opened by a request racing the close included."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        self.closed = False

    def add(self, stream: Any) -> bool:
        """Register ``stream``; False (and nothing registered) once the client is closed."""
        with self._lock:
            if not self.closed:
                self._open.add(stream)
                return True
        return False

    def discard(self, stream: Any) -> None:
        with self._lock:
            self._open.discard(stream)

    def close_all(self) -> None:
        with self._lock:
            self.closed = True
            live, self._open = list(self._open), set()
        for stream in live:
            stream.close()


def _deadline_backend(httpcore: ModuleType, streams: _Streams) -> Any:
    """httpcore's sync network backend, each operation's timeout clamped to the current
    attempt's deadline; its streams are registered in ``streams``, and none opens once closed."""

    class DeadlineStream(httpcore.NetworkStream):
        def __init__(self, inner: Any):
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self._inner.read(max_bytes, _time_left(httpcore.ReadTimeout, timeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._inner.write(buffer, _time_left(httpcore.WriteTimeout, timeout))

        def close(self) -> None:
            streams.discard(self)
            # Shut the socket down first: a read blocked in another thread (Ctrl-C closing the
            # engine mid-request) then returns at once instead of holding the process at exit.
            sock = self._inner.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # already closed by the peer
                    pass
            self._inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
            return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _time_left(httpcore.ConnectTimeout, timeout)))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class DeadlineBackend(httpcore.NetworkBackend):
        def __init__(self) -> None:
            self._inner = httpcore.SyncBackend()

        def _opened(self, inner: Any) -> Any:
            stream = DeadlineStream(inner)
            if not streams.add(stream):
                stream.close()
                raise httpcore.ConnectError("the client was closed")
            return stream

        def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                        socket_options: Any = None) -> Any:
            if streams.closed:
                raise httpcore.ConnectError("the client was closed")
            clamped = _time_left(httpcore.ConnectTimeout, timeout)
            return self._opened(self._inner.connect_tcp(host, port, clamped, local_address, socket_options))

        def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
            if streams.closed:
                raise httpcore.ConnectError("the client was closed")
            return self._opened(self._inner.connect_unix_socket(path, _time_left(httpcore.ConnectTimeout, timeout), socket_options))

        def sleep(self, seconds: float) -> None:
            time.sleep(seconds)

    return DeadlineBackend()


def _transport(httpx: ModuleType, httpcore: ModuleType, max_connections: int, keep_alive: bool, streams: _Streams) -> Any:
    """An httpx transport over httpcore's connection pool on the deadline backend (what
    ``httpx.HTTPTransport`` builds, with the network backend its constructor does not take)."""

    class Body(httpx.SyncByteStream):
        def __init__(self, stream: Any):
            self._stream = stream

        def __iter__(self):
            yield from self._stream

        def close(self) -> None:
            if hasattr(self._stream, "close"):
                self._stream.close()

    class DeadlineTransport(httpx.BaseTransport):
        def __init__(self) -> None:
            self._pool = httpcore.ConnectionPool(
                ssl_context=httpx.create_ssl_context(), max_connections=max_connections, keepalive_expiry=KEEPALIVE_S,
                max_keepalive_connections=max_connections if keep_alive else 0, network_backend=_deadline_backend(httpcore, streams),
            )

        def handle_request(self, request: Any) -> Any:
            url = request.url
            req = httpcore.Request(method=request.method, headers=request.headers.raw, content=request.stream, extensions=request.extensions,
                                   url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path))
            resp = self._pool.handle_request(req)
            return httpx.Response(status_code=resp.status, headers=resp.headers, stream=Body(resp.stream), extensions=resp.extensions)

        def close(self) -> None:
            self._pool.close()

    return DeadlineTransport()


def _refused(e: BaseException) -> bool:
    seen = 0
    cur: BaseException | None = e
    while cur is not None and seen < 8:
        if isinstance(cur, ConnectionRefusedError) or "Connection refused" in str(cur) or "Errno 111" in str(cur):
            return True
        cur, seen = cur.__cause__ or cur.__context__, seen + 1
    return False


class PooledClient:
    """One keep-alive connection pool for one server (``keep_alive=False``: a connection per request)."""

    def __init__(self, max_connections: int = 8, keep_alive: bool = True):
        httpx, httpcore = http_modules()
        self._httpx = httpx
        n = max(1, int(max_connections))
        self._streams = _Streams()
        self._client = httpx.Client(
            transport=_transport(httpx, httpcore, n, keep_alive, self._streams),
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n if keep_alive else 0),
            follow_redirects=False,
        )
        self._timeouts = (httpx.TimeoutException, httpcore.TimeoutException)
        self._broken = (httpx.NetworkError, httpx.RemoteProtocolError, httpcore.NetworkError, httpcore.RemoteProtocolError, OSError)
        self._failed = (httpx.HTTPError, httpx.InvalidURL, httpcore.ProtocolError, httpcore.UnsupportedProtocol)

    def request(self, method: str, url: str, body: bytes | None, headers: dict[str, str], deadline_s: float) -> Reply:
        """One attempt, ended by ``deadline_s`` of wall time. Raises :class:`Refused`, :class:`Transient` (with why) or :class:`Failed`."""
        if self._streams.closed:
            raise Failed("the client was closed")
        timeout = self._httpx.Timeout(deadline_s)
        _deadline.at = time.monotonic() + deadline_s
        try:
            with self._client.stream(method, url, content=body, headers=headers, timeout=timeout) as resp:
                chunks, size = [], 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise Failed(f"the reply is larger than {MAX_BODY_BYTES >> 20} MiB")
                    chunks.append(chunk)
                    if time.monotonic() > _deadline.at:  # a proxy's stream, which the backend does not clamp
                        raise Transient(f"timed out (backend.timeout_s={deadline_s:g} s for the whole reply)")
                return Reply(resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, b"".join(chunks))
        except (Refused, Transient, Failed):
            raise
        except self._timeouts:
            raise Transient(f"timed out (backend.timeout_s={deadline_s:g} s for the whole reply)") from None
        except self._broken as e:
            if _refused(e):
                raise Refused(str(e)) from None
            raise Transient(" ".join(str(e).split()) or type(e).__name__) from None
        except self._failed as e:
            raise Failed(" ".join(str(e).split()) or type(e).__name__) from None
        finally:
            _deadline.at = None

    def close(self) -> None:
        """End every connection, including those whose requests are in flight in other
        threads (they return at once, failed); later requests fail without connecting."""
        self._streams.close_all()
        self._client.close()
