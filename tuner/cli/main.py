"""Entry point: the command modules registered on the one typer app, and the error handling
that turns a user error into one line and exit code 2.

Start-up (issue #29): `tuner CMD` imports only the module of CMD; the other commands are
registered as stubs whose help is their function's docstring, read from the module's source
(not imported), so `tuner --help` lists every command without loading any of them.
`tuner.cli.main.app` (tests, CliRunner) is the app with every command loaded."""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import inspect
import os
import signal
import sys
import threading
import time

import typer

from tuner.cli import app as _cli
from tuner.cli import early_sigint
from tuner.cli.app import err
from tuner.core import interrupts
from tuner.core.errors import TunerError
from tuner.core.secrets import mask_secrets

#: command -> (module that registers it, the function it runs), in `tuner --help`'s order;
#: `workload` is the group of tuner.cli.app whose commands tuner.cli.catalogs registers
COMMANDS = {
    "gpus": ("tuner.cli.catalogs", "gpus"),
    "models": ("tuner.cli.catalogs", "models"),
    "simulate": ("tuner.cli.simulate", "simulate"),
    "replay": ("tuner.cli.replay", "replay"),
    "search": ("tuner.cli.search", "search"),
    "export": ("tuner.cli.exports", "export_cmd"),
    "report": ("tuner.cli.exports", "report_cmd"),
    "profile": ("tuner.cli.profiling", "profile"),
    "fit": ("tuner.cli.profiling", "fit"),
    "cost": ("tuner.cli.profiling", "cost"),
    "transfer": ("tuner.cli.profiling", "transfer"),
    "worker": ("tuner.cli.study", "worker"),
    "results": ("tuner.cli.study", "results"),
    "validate": ("tuner.cli.validation", "validate_cmd"),
    "calibrate": ("tuner.cli.validation", "calibrate_cmd"),
    "workload": ("tuner.cli.catalogs", None),
}


def load_commands(names=None) -> typer.Typer:
    """The app with the commands `names` (default all) loaded for real and the rest as stubs
    (their help from their docstrings). Idempotent, in any order: a command loaded for real
    replaces its stub (several main() calls share the one app in a process, e.g. tests)."""
    app = _cli.app
    for module in dict.fromkeys(COMMANDS[n][0] for n in (COMMANDS if names is None else names)):
        own = {n for n, (m, fn) in COMMANDS.items() if m == module and fn is not None}
        app.registered_commands[:] = [c for c in app.registered_commands
                                      if not (c.callback is _stub and _name(c) in own)]
        mod = importlib.import_module(module)  # catalogs, replay, search, simulate: on import
        register = getattr(mod, "register", None)
        if register is not None and not own <= {_name(c) for c in app.registered_commands}:
            register(app)
    have = {_name(c) for c in app.registered_commands}
    for name, (module, fn) in COMMANDS.items():
        if fn is not None and name not in have:
            app.command(name, help=_docstring(module, fn), add_help_option=False)(_stub)
    return app


def _name(info) -> str:
    """A registered command's name (typer's rule for one registered without a name)."""
    return info.name or info.callback.__name__.lower().replace("_", "-")


def _stub() -> None:
    """Never run: main() loads a command for real before typer dispatches to it."""
    raise TunerError("internal error: a command stub ran")  # pragma: no cover


def _docstring(module: str, function: str) -> str:
    """The docstring of `function` in `module`'s source, read without importing the module
    (tests/test_cli_startup.py checks it is what the loaded command's help is)."""
    spec = importlib.util.find_spec(module)
    text = open(spec.origin, encoding="utf-8").read()  # noqa: SIM115 - one read
    start = text.index(f"\ndef {function}(")
    first = text.index('"""', start) + 3
    return inspect.cleandoc(text[first:text.index('"""', first)])


def __getattr__(name: str):
    if name == "app":  # `from tuner.cli.main import app`: every command, loaded
        return load_commands()
    raise AttributeError(name)


def _command_of(argv: list[str]) -> list[str] | None:
    """The command `argv` runs ([name]), or None: help, no command, or one tuner lacks."""
    for arg in argv:
        if not arg.startswith("-"):
            return [arg] if arg in COMMANDS else None
        return None  # an option before any command: only --help exists there
    return None


def _error_line(message: str) -> None:
    """`error: MESSAGE` as one line: never wrapped, no markup, inner newlines folded."""
    from rich.markup import escape

    message = mask_secrets(" ".join(message.split()))  # never a password (storage URLs)
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


#: what a Ctrl-C leaves to continue from, by command: only `search` has --resume (the others
#: keep nothing half-done to resume, so they print plain "interrupted")
INTERRUPTED_NOTE = {"search": " (finished trials are saved; rerun with --resume to continue)"}

_QUIET_UNTIL_S = 0.0  # time.monotonic() until which Ctrl-C is ignored: main() is done, exiting


def _on_sigint(signum, frame) -> None:
    """Ctrl-C: KeyboardInterrupt, except once main() has finished (its outputs are complete and
    its line printed): the interpreter's exit would otherwise print a traceback for it."""
    if time.monotonic() < _QUIET_UNTIL_S:
        return
    interrupts.mark_sigint()
    raise KeyboardInterrupt


def _is_process() -> bool:
    """True when main() is the process's entry point (console script, `python -m`), not a call
    from Python (tests, CliRunner): only then does it own SIGINT past its own return."""
    top = sys.modules.get("__main__")
    return getattr(top, "main", None) is main or getattr(top, "entry", None) is entry


def main(leave: bool = False) -> None:
    """The CLI on sys.argv. `leave` (the `tuner` script, `python -m tuner.cli`): a finished
    command ends the process without the interpreter's teardown (:func:`_leave`)."""
    previous = signal.getsignal(signal.SIGINT)
    try:
        _main(leave)
    finally:
        if not _is_process():  # an in-process caller gets its own handler back
            signal.signal(signal.SIGINT, previous)


def _main(leave: bool) -> None:
    global _QUIET_UNTIL_S
    _QUIET_UNTIL_S = 0.0
    command = (_command_of(sys.argv[1:]) or [None])[0]
    interrupts.clear_sigint()
    # not when ignored (nohup); tuner.cli's early handler covered the imports until now
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, early_sigint):
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        # Not standalone: typer's own usage errors come back here to be printed as one line
        # too (standalone, typer draws them as a multi-line panel).
        app = load_commands(_command_of(sys.argv[1:]) or [])
        rv = app(standalone_mode=False)
    except TunerError as exc:
        _error_line(str(exc))
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # click-style errors (typer vendors click)
        code = getattr(exc, "exit_code", 2)
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help was printed already
            sys.exit(code)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if type(exc).__name__ == "NoSuchOption":  # an engine's own flag name: say tuner's
            from tuner.core.config import engine_flag_hint

            command = getattr(ctx, "command", None)
            available = {o for prm in getattr(command, "params", []) for o in prm.opts}
            message += engine_flag_hint(getattr(exc, "option_name", "") or "", available)
        _error_line(message + hint)
        sys.exit(code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(1)
    except KeyboardInterrupt:
        rv = 130
    except OSError as exc:  # the machine refused (disk full, permissions): one line, no trace
        if not interrupts.sigint_seen():
            where = f" ({exc.filename})" if exc.filename else ""
            _error_line(f"{exc.strerror or exc}{where}.")
            sys.exit(2)
        rv = 130
    except Exception as exc:  # after a Ctrl-C, any failure is it (tuner.core.interrupts)
        if not interrupts.is_interrupt(exc):
            raise
        rv = 130
    _QUIET_UNTIL_S = time.monotonic() + 5.0  # done: a Ctrl-C while exiting changes nothing
    # ... nor late in the interpreter's exit, which puts back SIGINT's default action (death
    # by the signal, no line) for a Python handler, but leaves an ignored signal ignored
    if _is_process():
        atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
    if rv == 130:  # typer turns Ctrl-C into exit code 130
        err.print("interrupted" + INTERRUPTED_NOTE.get(command, ""))
        if _is_process():
            # A Ctrl-C that landed in the import machinery (a lazy import's module lock)
            # makes the interpreter's exit end in death by SIGINT, status -2 instead of 130,
            # after the line above (measured: ~1 in 30 Ctrl-Cs in the first 1.5 s). Everything
            # is saved and closed by now (the journal is appended line by line, outputs are
            # written whole or not at all): leave without the interpreter's teardown.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
    code = rv if isinstance(rv, int) else 0
    if leave:
        _leave(code)
    sys.exit(code)


def _leave(code: int) -> None:
    """End the process after a finished command without the interpreter's teardown, which
    frees every module and object one by one: ~50 ms after a `tuner simulate` (issue #29 item
    3), and work no finished command needs. Every output is written whole and closed by now
    (tuner.core.io writes files atomically, inside `with`); the atexit handlers run here
    (logging, multiprocessing, temporary folders, the SIGINT guard above). With another
    Python thread still alive, the interpreter's own exit joins it."""
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # e.g. a closed pipe: the interpreter's exit would end with 120 too
        code = code or 120
    os._exit(code)


if __name__ == "__main__":
    main()


def entry() -> None:
    """The `tuner` console script and `python -m tuner.cli`."""
    main(leave=True)
