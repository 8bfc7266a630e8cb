"""Where a credential may go, and where it never does.

A user puts credentials in three places madara reads: the user info of a URL
(``http://alice:PW@host/v1``), an environment variable a setting names
(``backend.api_key_env``) and, never on purpose, a config value that interpolates a
resolver (``${oc.env:TOKEN}``). Each is used for the request it was given for and kept
nowhere else:

* :func:`redact` removes every URL's user info from a text (a config, a record, an
  error or log line) and :func:`without_userinfo` from one URL: what is written, printed,
  tracked or keyed never holds it.
* :func:`resolver_problem` finds a resolver in a config read from a file the user did not
  type (a cell's ``config.yaml``, a ``--config-dir`` file, a grid): composing it would
  read the environment (or run a custom resolver) into the cell's folder name, records
  and keys.
* :func:`key_env_problem` keeps ``api_key_env`` to variables named for keys
  (``*API_KEY``, ``*TOKEN``): another name (an AWS secret) is taken only from the
  command line, where the user typed it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# scheme://USERINFO@ -- userinfo runs to the authority's last '@' (no '/', '?', '#',
# whitespace, quote or backslash on the way: those end a URL, or a JSON or YAML string).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#\"'<>\\]*@")
# ${name:...}: an interpolation that runs a resolver (oc.env, oc.decode, a custom one);
# a plain ${key.path} reference has no colon after its name.
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
    """Why plain config data read from a file may not be composed, or None: a value that
    calls a resolver, or an ``api_key_env`` naming a variable not named for a key."""
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
