"""Prompt sets: every prompt sent, as plain-text templates in ``prompts/<NAME>/`` (``prompts=NAME``;
``set.yaml`` may say ``extends: OTHER``), checked at composition. Templates fill named fields only
(``{{question}}``; ``\\{{`` is a literal ``{{``), values inserted verbatim; the families say which
templates exist and their fields (docs/running.md, "Your own prompts")."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Mapping, Sequence

from madara_cli.core.errors import ConfigError
from madara_cli.core.paths import check_name
from madara_cli.core.records import Doc, Example
from madara_cli.core.sidefiles import file_stamp, read_text, yaml_problem
from madara_cli.plugins.catalog import CATALOG

SHIPPED = "madara"  # the default set, configs/prompts/madara/
SET_FILE = "set.yaml"  # optional: {extends: NAME}
SUFFIX = ".txt"

_FIELD = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# cut at an escaped "\{{" (literal "{{"), a field, a "{" before a field's "{{" ("{{{x}}}"), or a "{{" opening no field
_TOKEN = re.compile(r"\\\{\{|" + _FIELD.pattern + r"|\{(?=\{\{)|\{\{")


def known_templates() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every template the registered prompt families declare: name -> (family, fields)."""
    return {t: (f.name, tuple(fields)) for f in CATALOG.families().values() for t, fields in f.templates.items()}


# the fixed sample each family's digest renders (madara_cli.config.identity.family_digest)
SAMPLE_DOCS = (Doc("d1", "Ada Quill was born in Varn in 1901.", "Ada Quill"), Doc("d2", "Varn is a river town.", "Varn"))
SAMPLE_EXAMPLES = (
    Example("q", "Where was Ada Quill born?", ("Varn",), SAMPLE_DOCS, "factoid"),
    Example("c", "Ada Quill was born in Varn.", ("SUPPORTS",), SAMPLE_DOCS, "fever"),
)


class TemplateError(ValueError):
    """A template's text is malformed: a ``{{`` that opens no field."""


@dataclass(frozen=True)
class Template:
    """A parsed template: literal text and ``{{field}}`` slots, in order."""

    text: str
    parts: tuple[tuple[bool, str], ...]  # (is_field, literal text or field name)

    @classmethod
    def parse(cls, text: str) -> "Template":
        parts: list[tuple[bool, str]] = []
        lit, pos = "", 0
        for m in _TOKEN.finditer(text):
            lit, pos, token = lit + text[pos : m.start()], m.end(), m.group(0)
            if m.group(1):
                parts += [(False, lit), (True, m.group(1))]
                lit = ""
            elif token == "{{":
                line, snippet = text.count("\n", 0, m.start()) + 1, text[m.start() : m.start() + 20].split("\n")[0]
                raise TemplateError(f"line {line}: '{snippet}' opens no field (a field is {{{{name}}}}; write \\{{{{ for a literal {{{{)")
            else:
                lit += "{{" if token.startswith("\\") else "{"
        parts.append((False, lit + text[pos:]))
        return cls(text, tuple(p for p in parts if p[0] or p[1]))  # no empty literals

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for is_field, p in self.parts if is_field))

    def render(self, values: Mapping[str, object]) -> str:
        """The text with each field replaced by ``str(values[field])``, verbatim (never scanned for fields)."""
        missing = next((p for is_field, p in self.parts if is_field and p not in values), None)
        if missing is not None:
            raise KeyError(f"template field '{missing}' was given no value")
        return "".join(str(values[p]) if is_field else p for is_field, p in self.parts)


@dataclass(frozen=True)
class PromptSet:
    """A loaded, checked prompt set: the templates its chain words, over the shipped set's."""

    name: str
    folders: tuple[str, ...]  # where its templates came from, the set's own folder first
    templates: Mapping[str, Template]

    @cached_property
    def sha(self) -> str:
        """sha256 of every template's text (what the set renders, not where it lives)."""
        h = hashlib.sha256()
        for name in sorted(self.templates):
            h.update(name.encode() + b"\0" + self.templates[name].text.encode("utf-8") + b"\0")
        return h.hexdigest()

    def __hash__(self) -> int:
        return hash(self.sha)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PromptSet) and self.sha == other.sha

    def template(self, name: str) -> Template:
        """Template ``name`` as this set words it, else its family's default."""
        tpl = self.templates.get(name)
        if tpl is not None:
            return tpl
        family = CATALOG.template_family(name)
        if family is None or name not in family.defaults:
            raise KeyError(f"prompt set '{self.name}' has no template {name}, and no prompt family declares a default for it")
        return _default(family.name, name, family.defaults[name])

    def render(self, template: str, **values: object) -> str:
        return self.template(template).render(values)


@cache
def _default(family: str, name: str, text: str) -> Template:
    try:
        return Template.parse(text)
    except TemplateError as e:
        raise ConfigError(f"prompt family '{family}': its default {name}, {e}") from None


MAX_TEMPLATE_BYTES = 1 << 20  # a prompt is a few KiB; a larger file is refused unread, as a config is


def _read_template(path: Path, folder: Path) -> str:
    """A template's text: a regular file up to :data:`MAX_TEMPLATE_BYTES` inside its set's folder, links
    resolved (its text is sent: a link to ``~/secret.txt`` would send that file)."""
    real, home = path.resolve(), folder.resolve()
    if home not in real.parents:
        raise ConfigError(f"{path}: links to {real}, outside its prompt set's folder {folder}; a template's text is sent to the "
                          "engine, so it must lie in the set's folder: copy the file in")
    text = read_text(path, "the template", ConfigError, MAX_TEMPLATE_BYTES)
    text = text.replace("\r\n", "\n")
    if not text.strip():
        # it would send only the values; deleting the file is how a set takes the one it extends
        raise ConfigError(f"{path}: the template is empty; write its prompt, or delete the file to use the one the set extends")
    return text[:-1] if text.endswith("\n") else text


def set_folder(name: str, dirs: Sequence[Path]) -> Path | None:
    """``prompts/<name>/`` in the first of ``dirs`` (config folders) that has it."""
    return next((Path(d) / "prompts" / name for d in dirs if (Path(d) / "prompts" / name).is_dir()), None)


def prompt_set_names(dirs: Sequence[Path]) -> list[str]:
    return sorted({p.name for d in dirs if (Path(d) / "prompts").is_dir() for p in (Path(d) / "prompts").iterdir() if p.is_dir()})


def _extends(folder: Path, name: str) -> str | None:
    path = folder / SET_FILE
    if not path.is_file():
        return None
    node, problem = yaml_problem(read_text(path, f"prompt set '{name}''s {SET_FILE}", ConfigError, MAX_TEMPLATE_BYTES))
    if problem is not None:
        raise ConfigError(f"prompt set '{name}' ({path}): {problem}")
    if node is None:
        return None
    if not isinstance(node, dict) or set(node) - {"extends"}:
        raise ConfigError(f"prompt set '{name}' ({path}): the only setting of a {SET_FILE} is 'extends: NAME'")
    base = node.get("extends")
    if base is not None and (not isinstance(base, str) or not base.strip()):
        raise ConfigError(f"prompt set '{name}' ({path}): extends must name a prompt set, not {base!r}")
    return base


def _check_template(name: str, path: Path, known: dict[str, tuple[str, tuple[str, ...]]] | None) -> Template:
    tname = path.name[: -len(SUFFIX)]
    try:
        tpl = Template.parse(_read_template(path, path.parent))
    except TemplateError as e:
        raise ConfigError(f"prompt set '{name}' ({path.parent}): {path.name}, {e}") from None
    if known is None:  # the shipped set: its files are the shipped families' (a test holds it)
        return tpl
    allowed = known[tname][1]
    bad = [f for f in tpl.fields if f not in allowed]
    if bad:
        raise ConfigError(f"prompt set '{name}' ({path.parent}): {path.name} names unknown field {{{{{bad[0]}}}}}; "
                          f"its fields: {', '.join(allowed) if allowed else 'none (plain text)'}")
    return tpl


def _load(name: str, dirs: Sequence[Path], chain: tuple[str, ...]) -> tuple[dict[str, Template], list[Path]]:
    check_name("prompts", name, ConfigError)
    folder = set_folder(name, dirs)
    if folder is None:
        where = f"named by {chain[-1]}'s {SET_FILE}" if chain else f"prompts={name}"
        raise ConfigError(f"unknown prompt set '{name}' ({where}); valid prompt sets: {', '.join(prompt_set_names(dirs)) or 'none'}")
    base = _extends(folder, name)
    shipped = name == SHIPPED and folder.parent.parent == Path(dirs[-1])
    known = None if shipped else known_templates()
    templates: dict[str, Template] = {}
    for path in sorted(folder.iterdir()):
        if path.name == SET_FILE or path.name.startswith("."):
            continue
        tname = path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else None
        if not (path.is_file() and tname is not None and (known is None or tname in known)):
            raise ConfigError(f"prompt set '{name}' ({folder}): unknown file {path.name}; a set holds {SET_FILE} and <template>{SUFFIX} files, "
                              f"templates: {', '.join(sorted(known or {}))}")
        templates[tname] = _check_template(name, path, known)
    folders = [folder]
    if base is not None:
        if base == name or base in chain:
            raise ConfigError(f"prompt set '{name}' ({folder / SET_FILE}): extends '{base}', which leads back to it ({' -> '.join([*chain, name, base])})")
        inherited, base_folders = _load(base, dirs, (*chain, name))
        templates = {**inherited, **templates}
        folders += base_folders
    return templates, folders


def _stamp(folders: Sequence[Path]) -> tuple:
    """What must stay the same for a loaded set to stand: every file's stamp, change time included."""
    return tuple((str(p), file_stamp(p)) for f in folders for p in sorted(Path(f).iterdir()))


_SETS: dict[tuple, tuple[tuple, PromptSet]] = {}


def load_prompt_set(name: str, dirs: Sequence[Path]) -> PromptSet:
    """Prompt set ``name`` from the first of ``dirs`` having it, checked (one :class:`ConfigError` line); kept until a file changes."""
    key = (name, tuple(str(d) for d in dirs))
    hit = _SETS.get(key)
    if hit is not None:
        try:
            if _stamp([Path(f) for f in hit[1].folders]) == hit[0]:
                return hit[1]
        except OSError:
            pass
    templates, folders = _load(name, dirs, ())
    shipped_folder = Path(dirs[-1]) / "prompts" / SHIPPED
    if shipped_folder not in folders and shipped_folder.is_dir():
        # what the set's chain does not word comes from the shipped set
        shipped, shipped_folders = _load(SHIPPED, [dirs[-1]], ())
        templates = {**shipped, **templates}
        folders = [*folders, *shipped_folders]
    loaded = PromptSet(name, tuple(str(f) for f in folders), templates)
    _SETS[key] = (_stamp(folders), loaded)
    return loaded
