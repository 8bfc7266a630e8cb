"""Where a credential may go, and where it never does. Credentials reach madara as a URL's user
info (``http://alice:PW@host/v1``), a variable a setting names (``backend.api_key_env``) or, never
on purpose, a resolver in a config value (``${oc.env:TOKEN}``); each serves its request only:

* :func:`redact` (a text) and :func:`without_userinfo` (one URL) drop URL user info from all
  that is written, printed, tracked or keyed.
* :func:`resolver_problem` refuses a resolver in a config read from a file (a cell's
  ``config.yaml``, a ``--config-dir`` file, a grid): it would read the environment (or run a
  custom resolver) into the cell's folder name, records and keys.
* :func:`key_env_problem` keeps a file's ``api_key_env`` to names ending ``API_KEY`` or
  ``TOKEN``; another (an AWS secret) only from the command line, where the user typed it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# scheme://USERINFO@, to the authority's last '@' ('/', '?', '#', whitespace, quotes, backslash end a URL or a JSON/YAML string)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#\"'<>\\]*@")
# ${name:...} runs a resolver (oc.env, oc.decode, a custom one); a plain ${key.path} has no colon after its name
_RESOLVER = re.compile(r"\$\{\s*([A-Za-z_][\w.\-]*)\s*:")
KEY_ENV_SUFFIXES = ("API_KEY", "TOKEN")


def redact(text: str) -> str:
    """``text`` with the user info of every URL in it removed (``http://a:b@h`` -> ``http://h``)."""
    return _USERINFO.sub(r"\1", text) if "@" in text else text


def without_userinfo(url: str) -> str:
    """``url`` as it may be shown and kept: no user name or password."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment))


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, Any, str]]:
    """(key path, mapping key, text) of every string in plain ``value``."""
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            if isinstance(v, str):
                yield sub, k, v
            else:
                yield from _strings(v, sub)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            sub = f"{path}[{i}]"
            if isinstance(v, str):
                yield sub, None, v
            else:
                yield from _strings(v, sub)


def resolver_problem(value: Any) -> str | None:
    """Why config data from a file may not be composed (a resolver, or a non-key ``api_key_env``), or None."""
    for where, key, text in _strings(value):
        m = _RESOLVER.search(text)
        if m:
            return (f"{where} calls the resolver ${{{m.group(1)}:...}}: resolvers are refused in config files (they would read "
                    f"the environment into the cell's records); write the value, or give it as an override on the command line")
        name = text.partition("=")[2] if key is None and text.lstrip("+~").startswith("backend.api_key_env=") else text if key == "api_key_env" else None
        problem = key_env_problem(name) if name is not None else None
        if problem:
            return f"{where}: {problem}"
    return None


def key_env_problem(name: str | None) -> str | None:
    """Why ``api_key_env=name`` may not come from a file, or None."""
    if not name or name.upper().endswith(KEY_ENV_SUFFIXES):
        return None
    return (f"api_key_env={name!a} names a variable that is not an API key (its name must end in "
            f"{' or '.join(KEY_ENV_SUFFIXES)}); name another only on the command line (backend.api_key_env={name})")
