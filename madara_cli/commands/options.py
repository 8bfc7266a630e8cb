"""What every verb of the ``madara`` command line shares: the two consoles, the one error for a
mistake the user can fix, and the results-folder option and override checks several verbs take."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console


class _Terminal(Console):
    """A console showing every control character it prints as a visible escape (newlines and tabs
    kept): what verbs print comes from files madara did not write in this run (someone's results
    folder, a cache, a config), and an ESC sequence there must not retitle the window, clear the
    screen or forge a line. rich's own styling is added after this, so it stays."""

    def render_str(self, text: str, **kwargs):  # noqa: ANN201, ANN003 - rich's signature
        from madara_cli.core.sidefiles import printable

        return super().render_str(printable(text, keep_newlines=True), **kwargs)

    def __init__(self, **kwargs):  # noqa: ANN003 - rich's signature
        super().__init__(**kwargs)
        self._width = None  # rich reads COLUMNS once, at import; :attr:`size` reads it per call

    @property
    def size(self):  # noqa: ANN201 - rich's type
        """The terminal's size: ``COLUMNS`` wide when set (read per call, not once at import); :data:`PIPED_WIDTH`
        when piped without it (rich would assume 80 columns, and tables read badly)."""
        from rich.console import ConsoleDimensions

        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            return ConsoleDimensions(int(columns), super().size.height)
        if not self.is_terminal:
            return ConsoleDimensions(PIPED_WIDTH, 25)
        return super().size


PIPED_WIDTH = 160
# Neither console parses markup: paths, names and data ("results/[/x]") print as they are, never
# as rich tags (which crashed run, show and tables after their work was written); a line styling
# its own words passes markup=True and escapes every value (:func:`styled`).
out = _Terminal(markup=False)
err = _Terminal(stderr=True, markup=False)


def styled(template: str, *values: object) -> str:
    """``template`` (our own rich markup, ``{}`` per value) with every value escaped, for ``out.print(..., markup=True)``."""
    from rich.markup import escape

    return template.format(*(escape(str(v)) for v in values))


class UserError(Exception):
    """Printed as one line, exit 2."""


def results_option(default: Optional[Path] = None):
    """The one results-folder option every verb takes (the same setting as ``results_dir=DIR``)."""
    return typer.Option(default, "--results", envvar="MADARA_RESULTS", help="Results folder (same as the results_dir=DIR override; env MADARA_RESULTS)")


def config_dir_option():
    """``--config-dir DIR`` after the verb: the same as the global option before it."""
    return typer.Option(None, "--config-dir", help="Extra config folder (also before the verb); its group options and prompt sets add to the shipped ones; repeatable")


def include_option():
    """``--include DIR`` after the verb: the same as the global option before it."""
    return typer.Option(None, "--include", help="Folder of Python modules registering strategies, backends or retrievers (also before the verb); repeatable")


def use_folders(config_dir: Optional[List[Path]], include: Optional[List[Path]]) -> None:
    """Add the verb's own --config-dir and --include folders, as the global options do."""
    from madara_cli.composition.plugins import add_include, load_plugins
    from madara_cli.config import add_config_dir

    for d in config_dir or []:
        add_config_dir(d)
    for d in include or []:
        add_include(d)
    if include:
        load_plugins()  # a folder asked for by name: its errors now


def with_results(overrides: list[str], results: Optional[Path]) -> list[str]:
    """``--results DIR`` as the ``results_dir=`` override; an explicit override wins."""
    from madara_cli.config.overrides import override_value, parse_overrides

    if results is None or any(o.key == "results_dir" for o in parse_overrides(overrides)):
        return overrides
    return [f"results_dir={override_value(str(results))}", *overrides]


def honoured(overrides: list[str], launcher: Optional[str] = None) -> list[str]:
    """Refuse in one line an override madara would accept and ignore: Hydra's settings (``hydra.run.dir=...``:
    madara runs no Hydra app, but ``--launcher``'s reads ``hydra.launcher.*``) and ``+key`` adding
    a key to a schema nothing reads."""
    from madara_cli.config import RootConfig
    from madara_cli.config.overrides import malformed, parse_overrides
    from madara_cli.config.validate import _schema_field

    parsed = parse_overrides(overrides)
    if malformed(parsed) is not None:
        return overrides  # compose names the malformed one
    for text, o in ((p.raw, p.hydra) for p in parsed):
        key = o.key_or_group
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            if launcher and key.startswith(("hydra.launcher.", "hydra/launcher")):
                continue
            where = (f"under --launcher {launcher} only hydra.launcher.* settings apply" if launcher else
                     "hydra.* settings apply only to a grid's launch (--launcher NAME: hydra.launcher.*)")
            raise UserError(f"'{text}' is not honoured: madara runs no Hydra app of its own, so {where}; "
                            "results go to results_dir=DIR, logs to stderr")
        if (o.is_add() or o.is_force_add()) and not key.startswith("strategy."):
            found = _schema_field(RootConfig, key)
            if found is not None and found[0] == "unknown":
                import dataclasses

                valid = ", ".join(f.name for f in dataclasses.fields(found[1]))
                raise UserError(f"'{text}' adds a setting madara does not read (its schemas are closed; "
                                f"valid {key.rsplit('.', 1)[0] + ' ' if '.' in key else ''}keys: {valid})")
            if found is not None and o.is_add():
                raise UserError(f"'{text}': {key} is an existing setting; set it without the '+': {text.lstrip('+')}")
    return overrides


def results_dir_of(results: Optional[Path]) -> Path:
    return results if results is not None else Path("results")


def complete_grid(incomplete: str) -> list[str]:
    """Shell completion of ``--grid``: the grid names that start with what is typed."""
    from madara_cli.config import options

    return [g for g in options("grid") if g.startswith(incomplete)]


def complete_override(incomplete: str) -> list[str]:
    """Shell completion of an override: ``strat`` → ``strategy=``, ``strategy=pd`` → ``strategy=pde`` (any config group)."""
    from madara_cli.config import GROUPS, options

    groups = (*GROUPS, "logger")
    if "=" not in incomplete:
        return [f"{g}=" for g in groups if g.startswith(incomplete)]
    key, _, value = incomplete.partition("=")
    if key not in groups:
        return []
    return [f"{key}={o}" for o in options(key) if o.startswith(value)]
