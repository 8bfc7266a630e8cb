"""Frozen retrieval snapshots (docs/running.md): ``<benchmark>__<retriever>-k<k>__<hash>.jsonl``,
one line per example (``q`` hashes its question, ``h`` the line), beside a meta file with the
key the hash was taken over and a ledger (line count, chain hash over the ``h`` in order).
An edited recorded line or a meta file that does not match stops the run in one line naming
the ``mv`` that rebuilds it, ``force=true`` or not. Each append first marks the ledger
``appending``, so a killed writer's complete lines are recorded on the next load and
unmarked ones (added by hand) cut off. The ledger sits beside the key, so names stay put."""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from madara_cli.config.identity import digest, snapshot_name, text_digest
from madara_cli.core.errors import SnapshotError
from madara_cli.core.paths import inside, writing
from madara_cli.core.records import Doc, Example

log = logging.getLogger(__name__)
Entry = tuple[str, tuple[Doc, ...], dict[str, Any]]  # a stored line: (question hash, docs, info)


def question_hash(ex: Example) -> str:
    payload = json.dumps({"q": ex.question, "query": ex.meta.get("query"), "pool": [d.id for d in ex.docs or ()]}, ensure_ascii=False)
    return text_digest(payload, 16)


def content_hash(row: dict[str, Any]) -> str:
    """sha256 of a line's content, ``h`` itself left out."""
    body = {k: row.get(k) for k in ("id", "q", "docs", "info")}
    return digest(body, 64, ascii=False)


def _doc_from_json(o: dict[str, Any], texts: dict[str, str] | None = None) -> Doc:
    """A stored document; ``texts`` shares one copy of a text among the lines that
    retrieved the same passage (a large snapshot repeats each one many times)."""
    text, title = o["text"], o.get("title", "")
    if texts is not None:
        text, title = texts.setdefault(text, text), texts.setdefault(title, title)
    return Doc(id=o["id"], text=text, title=title, meta=o.get("meta") or {})


# What a whole check found, kept per (file, stamp, ledger) for the next cell that reads the
# file (a grid's plan checked it once per cell): the stamp's change time moves with any
# write; a file changed within two seconds is checked every time (the stamp's resolution
# may hide a second write).
_CHECKED: dict[tuple, dict[str, Entry]] = {}
_CHECKED_MAX = 64
_RACY_NS = 2_000_000_000


def _stamp(path: Path, ledger: dict[str, Any]) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < _RACY_NS:
        return None
    if len(_CHECKED) >= _CHECKED_MAX:
        _CHECKED.clear()
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, json.dumps(ledger, sort_keys=True))


class Snapshot:
    """One snapshot file; ``load`` reads it, ``append`` adds retrieved examples."""

    def __init__(self, root: str | Path, key: dict[str, Any]):
        self.key = key
        stem = snapshot_name(key)
        self.path = inside(root, Path(root) / f"{stem}.jsonl")
        self.meta_path = inside(root, Path(root) / f"{stem}.meta.json")

    def _refuse(self, what: str) -> SnapshotError:
        return SnapshotError(f"retrieval snapshot {self.path} {what}. force=true re-runs cells on the same snapshot and does not skip "
                             f"this check; to rebuild it by retrieving again, move it aside and rerun: mv {self.path} {self.path}.edited")

    def _meta(self, required: bool = True) -> dict[str, Any] | None:
        """The meta file, checked against this snapshot's key and holding a ledger; None when there is none and it is not ``required``."""
        if not self.meta_path.is_file():
            if required:
                raise self._refuse(f"has no meta file {self.meta_path.name} (the key and ledger it was written under)")
            return None
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            meta = None
        if not isinstance(meta, dict):
            raise self._refuse(f"has a meta file {self.meta_path.name} that is not a JSON object")
        want = json.loads(json.dumps(self.key, ensure_ascii=False))
        if {k: v for k, v in meta.items() if k != "ledger"} != want:
            raise self._refuse(f"has a meta file {self.meta_path.name} that does not record this snapshot's key")
        ledger = meta.get("ledger")
        if ledger is None:
            # Every snapshot madara writes has one; trusting a file without it would let a
            # deleted key stand in for a check of every line's place.
            raise self._refuse(f"has a meta file {self.meta_path.name} without a ledger (its record of the file's lines): "
                               f"it was deleted, or the file predates the ledger")
        if not (isinstance(ledger, dict) and isinstance(ledger.get("lines"), int) and not isinstance(ledger.get("lines"), bool)
                and isinstance(ledger.get("chain"), str) and isinstance(ledger.get("appending", False), bool)):
            raise self._refuse(f"has a meta file {self.meta_path.name} whose ledger is damaged")
        return meta

    def _scan(self, ledger: dict[str, Any]) -> tuple[dict[str, Entry], int, str, int]:
        """Every line checked against its hash, and the recorded lines against the ledger (there, in
        order): (the recorded lines' entries, all lines, the chain over all, the byte offset where the
        recorded ones end). A torn line (a killed writer's, never recorded) is skipped."""
        upto = ledger["lines"]
        out: dict[str, Entry] = {}
        texts: dict[str, str] = {}
        count, chain, chain_upto, offset, end_upto = 0, "", "", 0, 0
        with self.path.open("rb") as f:
            for number, raw in enumerate(f, 1):
                offset += len(raw)
                try:
                    row = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    continue  # torn (the next writer started a fresh line after it) or blank: never in the ledger
                except RecursionError:
                    raise self._refuse(f"line {number} is nested too deeply to be a snapshot line") from None
                try:
                    entry = (row["q"], tuple(_doc_from_json(d, texts) for d in row["docs"]), row.get("info") or {})
                    hash(row["id"])
                except (KeyError, TypeError, AttributeError):
                    raise self._refuse(f"line {number} is not a snapshot line (id, q, docs)") from None
                if "h" not in row:
                    raise self._refuse(f"line {number} (example {row['id']!r}) has no content hash")
                if row["h"] != content_hash(row):
                    raise self._refuse(f"line {number} (example {row['id']!r}) does not match the content hash recorded when it "
                                       f"was retrieved: its documents were changed after retrieval")
                count += 1
                if count <= upto:
                    out[row["id"]] = entry
                chain = _chain(chain, row["h"])
                if count == upto:
                    chain_upto, end_upto = chain, offset
        if count < upto:
            raise self._refuse(f"holds {count} lines where its meta file records {upto}: lines were removed")
        if (chain_upto if upto else "") != ledger["chain"]:
            raise self._refuse(f"lines 1-{upto} are not the lines its meta file records, in that order: "
                               "a line was removed, inserted or reordered")
        return out, count, chain, end_upto

    def load(self) -> dict[str, Entry]:
        """id -> (question hash, docs, info): an edited file raises :class:`SnapshotError`, lines after
        the recorded ones are settled (:meth:`_settle`), never a reason to refuse it."""
        if not self.path.is_file():
            return {}
        for _ in range(2):
            # Each lock below is released when its file closes. Shared here: a parallel
            # worker's append lands before or after, never between.
            with self.path.open("rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_SH)
                ledger = self._meta()["ledger"]  # type: ignore[index]
                stamp = _stamp(self.path, ledger)
                if stamp is not None and stamp in _CHECKED:
                    return dict(_CHECKED[stamp])
                out, count, _, _ = self._scan(ledger)
            if count == ledger["lines"] and not ledger.get("appending"):
                if stamp is not None:
                    _CHECKED[stamp] = dict(out)
                break
            self._settle()  # then read again what it recorded or kept
        return out

    def _settle(self) -> None:
        """Under the file lock, bring the ledger up to the file: lines after the recorded ones
        are a killed writer's and recorded when the ledger is marked ``appending``, else (a
        madara from before the mark, or lines added by hand) cut off and retrieved again."""
        with writing(self.path), self.path.open("rb+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            meta = self._meta(required=False)
            if meta is None:
                return
            ledger = meta["ledger"]
            _, count, chain, end_upto = self._scan(ledger)
            extra = count - ledger["lines"]
            if ledger.get("appending"):
                self._write_meta({**meta, "ledger": {"lines": count, "chain": chain}})
                if extra:
                    log.warning("retrieval snapshot %s: recorded %d line(s) a writer appended before it was stopped", self.path, extra)
            elif extra:
                f.truncate(end_upto)
                log.warning(
                    "retrieval snapshot %s: dropped %d line(s) after the %d its meta file records (a writer stopped before "
                    "recording them, or lines added by hand); their examples are retrieved again", self.path, extra, ledger["lines"])

    @staticmethod
    def _line(row: dict[str, Any]) -> tuple[str, str]:
        """(the line, its hash)."""
        row = {k: row.get(k) for k in ("id", "q", "docs", "info")}
        row["h"] = content_hash(row)
        return json.dumps(row, ensure_ascii=False) + "\n", row["h"]

    def append(self, rows: Iterable[tuple[Example, Sequence[Doc], dict[str, Any]]]) -> int:
        """Append one line per (example, documents, info), rendered one at a time (a
        large retrieval is never held as text all at once); the number written."""
        lines = (self._line({"id": ex.id, "q": question_hash(ex), "info": info,
                             "docs": [{"id": d.id, "title": d.title, "text": d.text, "meta": d.meta} for d in docs]})
                 for ex, docs, info in rows)
        first = next(lines, None)
        if first is None:
            return 0
        return self._write_lines(itertools.chain([first], lines))

    def _write_meta(self, meta: dict[str, Any]) -> None:
        tmp = self.meta_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(self.meta_path)

    def _write_lines(self, lines: Iterable[tuple[str, str]]) -> int:
        """Append ``lines`` ((text, hash) pairs) under the file lock: the ledger marked ``appending``,
        the lines written, then recorded (a killed writer leaves the mark). The number written."""
        written = 0
        with writing(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                end = f.seek(0, os.SEEK_END)
                # A new file (or one moved aside to rebuild it) gets a fresh meta file:
                # whatever the old one said (a stale ledger, a damaged key) is replaced.
                meta: dict[str, Any] = dict(self.key) if end == 0 else self._meta()  # type: ignore[assignment]
                ledger = {"lines": 0, "chain": ""} if end == 0 else meta["ledger"]
                if ledger.get("appending"):  # a killed writer's lines: recorded before ours follow them
                    _, count, chain, _ = self._scan(ledger)
                    ledger = {"lines": count, "chain": chain}
                count, chain = ledger["lines"], ledger["chain"]
                for text, h in lines:
                    if written == 0:
                        self._write_meta({**meta, "ledger": {"lines": count, "chain": chain, "appending": True}})
                        if end > 0:  # a killed writer's torn line must not swallow ours
                            f.seek(end - 1)
                            if f.read(1) != b"\n":
                                f.write(b"\n")
                    f.write(text.encode("utf-8"))
                    count, chain, written = count + 1, _chain(chain, h), written + 1
                f.flush()
                self._write_meta({**meta, "ledger": {"lines": count, "chain": chain}})
        return written


def _chain(previous: str, h: str) -> str:
    """The ledger's running hash: every line's ``h`` in file order."""
    return text_digest(f"{previous}{h}")
