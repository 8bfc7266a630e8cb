"""The ``madara`` command line: the one Typer app, the options every verb shares, and the entry
point. The verbs (:mod:`madara_cli.commands`) are registered here in ``madara --help``'s order;
each parses its arguments and calls one library function, and a user's error ends with one line
on stderr and exit 2."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import List, Optional

import typer

from madara_cli.bench import verb as bench_verb
from madara_cli.commands import compare_verbs, list_verbs, probe_verbs, reproduce_verbs, route_verbs, run_verbs, table_verbs, tool_verbs
from madara_cli.commands.exits import RESUME_HINT, Interrupted, forget_received, interrupt, os_error_line, override_for_option, received
from madara_cli.commands.options import UserError, err

app = typer.Typer(
    add_completion=True,  # madara --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Reproduce 'To Isolate or to Score?' (MADARA) and run its Diagnose->Treat pipeline.",
)


@app.callback()
def _global(
    config_dir: Optional[List[Path]] = typer.Option(None, "--config-dir", help="Extra config folder (Hydra's convention): its group options add to or replace the shipped ones; repeatable"),
    include: Optional[List[Path]] = typer.Option(None, "--include", help="Folder of Python modules registering strategies, backends or retrievers (imported by path); repeatable"),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="Log what happens (-v info, -vv debug)"),
) -> None:
    """Options every verb shares."""
    from madara_cli.composition.plugins import add_include, forget_loaded, load_plugins
    from madara_cli.config import add_config_dir
    from madara_cli.core.logs import setup_logging

    for d in config_dir or []:
        add_config_dir(d)
    for d in include or []:
        add_include(d)
    setup_logging(verbose, err)
    forget_loaded()  # the first composition of this invocation imports the plugins afresh
    if include:
        load_plugins()  # a folder asked for by name: its errors now, whatever the verb


# The verbs, in the order `madara --help` lists them.
app.command(context_settings={"allow_extra_args": False})(run_verbs.run)
app.command("ls")(list_verbs.ls)
app.command()(run_verbs.plan)
app.command()(probe_verbs.probe)
app.command()(route_verbs.route)
app.command()(table_verbs.tables)
app.command()(table_verbs.plot)
app.command()(table_verbs.report)
app.command()(compare_verbs.compare)
app.command()(route_verbs.audit)
app.command()(reproduce_verbs.reproduce)
app.command()(list_verbs.show)
app.command()(bench_verb.bench)
app.command()(tool_verbs.prepare)
app.add_typer(tool_verbs.index_app, name="index")
app.add_typer(tool_verbs.cache_app, name="cache")
app.add_typer(tool_verbs.prompts_app, name="prompts")


def main() -> None:
    """Entry point: one clear line instead of a traceback for anything a user can fix."""
    from madara_cli.core.errors import BackendError, ConfigError, DataError, PluginInterrupted

    try:  # typer >= 0.20 vendors click; older ones use it directly
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover
        from click import exceptions as cx

    # typer turns KeyboardInterrupt into a silent exit 130 before it reaches us, so SIGINT and SIGTERM
    # raise our own exception, passing through it (and every `except Exception`) and unwinding the
    # finally blocks that close the engine and the cache.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    forget_received()
    try:
        try:
            rv = app(standalone_mode=False, prog_name="madara")  # also under python -m madara_cli.cli (completion scripts name it)
        except Interrupted:
            raise
        except BaseException:
            if received() is not None:  # the interrupt, turned into another error by code it passed through
                raise Interrupted(received()) from None
            raise
    except Interrupted as e:
        _say(f"{'interrupted' if e.signum == signal.SIGINT else 'terminated'}: {RESUME_HINT}")
        sys.exit(128 + e.signum)
    except cx.NoSuchOption as e:
        hint = override_for_option(e.option_name, sys.argv[1:])
        if hint:
            _say(f"error: no such option {e.option_name}: madara takes settings as overrides; write {hint}")
            sys.exit(2)
        cmd = e.ctx.command if e.ctx else None
        valid = sorted(o for p in (cmd.params if cmd else []) for o in p.opts if o.startswith("-")) + ["--help"]
        _say(f"error: no such option {e.option_name}; valid options: {', '.join(valid)}")
        sys.exit(2)
    except cx.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":
            err.print(e.format_message(), highlight=False, soft_wrap=True)
            sys.exit(0)
        hint = ""
        if "No such command" in e.format_message():
            hint = "; valid commands: " + ", ".join(sorted(app_commands()))
        _say(f"error: {e.format_message()}{hint}")
        sys.exit(2)
    except PluginInterrupted as e:
        _say(f"error: {e}")
        sys.exit(130)
    except (typer.Abort, KeyboardInterrupt):
        _say(f"interrupted: {RESUME_HINT}")
        sys.exit(130)
    except (UserError, ConfigError, DataError, BackendError) as e:
        _say(f"error: {e}")
        sys.exit(2)
    except OSError as e:  # a folder that cannot be written, a full disk: one line, finished work stays
        _say(f"error: {os_error_line(e)} (finished cells and cached completions are kept)")
        sys.exit(2)
    sys.exit(rv if isinstance(rv, int) else 0)


def _say(line: str) -> None:
    """One line on stderr, as it is (no markup), with no URL's password in it."""
    from madara_cli.core.credentials import redact

    err.print(redact(line), markup=False, highlight=False, soft_wrap=True)


def app_commands() -> list[str]:
    return [c.name or c.callback.__name__ for c in app.registered_commands]


if __name__ == "__main__":
    main()
