"""``madara prompts import-reference CHECKOUT --out DIR``: a prompt set from the user's checkout of
the authors' code (js-lee-AI/MADARA; madara ships none of their wording), read with :mod:`ast`,
never executed, never outside it: their string constants and user-turn f-strings, the rest from
the shipped set. Staged, checked by loading, renamed in under a lock (a whole set); a ``prompts``
or ``prompts/authors`` that is a link or a file is refused."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from madara_cli.config.prompt_sets import SET_FILE, SHIPPED, SUFFIX, load_prompt_set
from madara_cli.core.errors import ConfigError
from madara_cli.core.sidefiles import read_text

NAME = "authors"
PROMPTS_FILE = Path("madara") / "prompts.py"
RSC_FILE = Path("madara") / "rsc.py"
TREATMENTS_FILE = Path("madara") / "treatments.py"

# constant in prompts.py -> the agent it prompts
_ASSESSORS = {"relevance": "RELEVANCE_ASSESSOR", "consistency": "CONSISTENCY_VERIFIER", "conflict": "CONFLICT_DETECTOR"}
_COT_PREFIX = "COT_DEPOLARIZATION_PREFIX"
_GENERATORS = {"factoid": "GENERATOR_FACTOID", "fever": "GENERATOR_FEVER"}
_RESCORE_SYSTEM = "_FORCED_REASONING_SYSTEM"
# (file, function) whose returned f-string is a user turn, and how its placeholders map to fields
_USER_TURNS = {
    "assessor": (TREATMENTS_FILE, "_assessor_user", {"question": "question", "target_doc": "document", "others": "other_documents"}),
    "generator": (PROMPTS_FILE, "build_generator_user_prompt", {"question": "question", "joined": "documents"}),
    "rescore": (RSC_FILE, "_forced_user", {"question": "question", "document": "document", "reasoning": "chain"}),
}


def _parse(root: Path, rel: Path) -> ast.Module:
    path = root / rel
    if not (path.exists() or path.is_symlink()):
        raise ConfigError(f"{root}: not a checkout of the authors' reference code (js-lee-AI/MADARA): no {rel.as_posix()}")
    real, top = path.resolve(), root.resolve()
    if top not in real.parents:
        raise ConfigError(f"{path}: a link out of the checkout (to {real}); the import reads only the checkout's own files")
    text = read_text(real, "the authors' " + rel.as_posix(), ConfigError)
    try:
        return ast.parse(text, filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"{path}: unreadable as Python ({type(e).__name__}); expected the authors' {rel.as_posix()}") from None


def _constants(tree: ast.Module) -> dict[str, str]:
    """The module-level string constants (``NAME = "..."``)."""
    return {target.id: node.value.value for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for target in node.targets if isinstance(target, ast.Name)}


def _escape(text: str) -> str:
    # a literal "{{" in their text must stay literal in a template
    return text.replace("{{", "\\{{")


def _returned_template(tree: ast.Module, function: str, fields: dict[str, str], where: Path) -> str:
    """The f-string ``function`` returns, each placeholder (a name or a slice of one) as the field it maps to."""
    for node in ast.walk(tree):  # a module function or a method (their _forced_user is a staticmethod)
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for ret in (n for n in ast.walk(node) if isinstance(n, ast.Return)):
                value = ret.value
                if isinstance(value, ast.BinOp):  # "..." f"..." concatenated with +: not their layout
                    break
                if isinstance(value, ast.JoinedStr):
                    parts: list[str] = []
                    for piece in value.values:
                        if isinstance(piece, ast.Constant):
                            parts.append(_escape(str(piece.value)))
                            continue
                        expr = piece.value if isinstance(piece, ast.FormattedValue) else None
                        while isinstance(expr, ast.Subscript):
                            expr = expr.value
                        name = expr.id if isinstance(expr, ast.Name) else None
                        if name not in fields:
                            raise ConfigError(f"{where.as_posix()}: {function}() fills a placeholder this importer does not know ({ast.unparse(piece)})")
                        parts.append("{{" + fields[name] + "}}")
                    return "".join(parts)
    raise ConfigError(f"{where.as_posix()}: no {function}() returning an f-string: not the layout of the authors' reference code")


def _need(constants: dict[str, str], name: str, where: Path) -> str:
    if name not in constants:
        raise ConfigError(f"{where.as_posix()}: no string constant {name}: not the layout of the authors' reference code")
    return constants[name]


def reference_templates(checkout: str | Path) -> dict[str, str]:
    """Template name -> text of the ``authors`` set from ``checkout``; past the parser's limits, one line."""
    try:
        return _templates(checkout)
    except (RecursionError, MemoryError) as e:
        what = "nested too deeply" if isinstance(e, RecursionError) else "too large for memory"
        raise ConfigError(f"{checkout}: a file of the checkout is {what} for Python's parser; "
                          "expected the authors' reference code (js-lee-AI/MADARA)") from None


def _templates(checkout: str | Path) -> dict[str, str]:
    root = Path(checkout).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{checkout}: no such folder (expected a checkout of the authors' reference code, js-lee-AI/MADARA)")
    trees = {rel: _parse(root, rel) for rel in (PROMPTS_FILE, RSC_FILE, TREATMENTS_FILE)}
    prompts, rsc = _constants(trees[PROMPTS_FILE]), _constants(trees[RSC_FILE])
    user = {kind: _returned_template(trees[rel], fn, fields, rel) for kind, (rel, fn, fields) in _USER_TURNS.items()}
    prefix = _need(prompts, _COT_PREFIX, PROMPTS_FILE)
    out: dict[str, str] = {}
    for agent, const in _ASSESSORS.items():
        system = _escape(_need(prompts, const, PROMPTS_FILE))
        out[f"{agent}_system"] = system
        out[f"{agent}_cot_system"] = _escape(prefix) + system  # their CoT: one prefix before each base prompt
        out[f"{agent}_user"] = out[f"{agent}_cot_user"] = user["assessor"]  # every assessor sees the others
    for task, const in _GENERATORS.items():
        out[f"{task}_system"] = _escape(_need(prompts, const, PROMPTS_FILE))
    out["factoid_user"] = user["generator"]
    out["fever_user"] = user["generator"].replace("{{question}}", "{{claim}}")
    out["rescore_system"] = _escape(_need(rsc, _RESCORE_SYSTEM, RSC_FILE))
    out["rescore_user"] = user["rescore"]
    return out


def _target(base: Path) -> Path:
    """``base/prompts/authors``, refusing a ``--out`` that is a file, or a ``prompts``/``authors`` link or file."""
    if (base.exists() or base.is_symlink()) and not base.is_dir():
        raise ConfigError(f"--out {base}: not a folder")
    for part in (base / "prompts", base / "prompts" / NAME):
        if part.is_symlink():
            raise ConfigError(f"--out {base}: {part} is a link (to {os.readlink(part)}); the import replaces that folder, "
                              "so it writes only a real folder: remove the link or pick another --out")
        if part.exists() and not part.is_dir():
            raise ConfigError(f"--out {base}: {part} is not a folder")
    return base / "prompts" / NAME


def write_reference_set(checkout: str | Path, out_dir: str | Path) -> Path:
    """Write the ``authors`` set to ``out_dir/prompts/authors/`` (an earlier import's replaced whole,
    after the new one loads) and return that folder."""
    import fcntl
    import shutil
    import tempfile

    from madara_cli.config.folders import config_dir

    base = Path(out_dir).expanduser()
    folder = _target(base)
    templates = reference_templates(checkout)
    folder.parent.mkdir(parents=True, exist_ok=True)
    _target(base)  # again: nothing may have put a link there meanwhile
    # beside prompts/, not in it (there it would be listed as a prompt set)
    staging = Path(tempfile.mkdtemp(prefix=f".{NAME}-import-", dir=base))
    try:
        new = staging / "prompts" / NAME
        new.mkdir(parents=True)
        for name, text in sorted(templates.items()):
            (new / (name + SUFFIX)).write_text(text + "\n", encoding="utf-8")
        (new / SET_FILE).write_text(f"extends: {SHIPPED}\n", encoding="utf-8")
        load_prompt_set(NAME, [staging, config_dir()])  # a template it cannot read fails here, not at run time
        with open(folder.parent / f".{NAME}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one swap at a time: each import leaves a whole set
            _target(base)
            old = staging / "replaced"
            if folder.exists():
                folder.rename(old)
            new.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
