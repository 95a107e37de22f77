"""Entry point: every command module registered on the one typer app, and the error handling
that turns a user error into one line and exit code 2."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time

import typer
from rich.markup import escape

import tuner.cli.catalogs  # noqa: F401  (registers gpus, models, workload stats)
import tuner.cli.replay  # noqa: F401  (registers replay)
import tuner.cli.search  # noqa: F401  (registers search)
import tuner.cli.simulate  # noqa: F401  (registers simulate)
from tuner.cli import exports, profiling, study, validation
from tuner.cli.app import app, err
from tuner.core import interrupts
from tuner.core.errors import TunerError
from tuner.core.secrets import mask_secrets

for _module in (exports, profiling, study, validation):
    _module.register(app)


def _error_line(message: str) -> None:
    """`error: MESSAGE` as one line: never wrapped, no markup, inner newlines folded."""
    message = mask_secrets(" ".join(message.split()))  # never a password (storage URLs)
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


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
    return getattr(sys.modules.get("__main__"), "main", None) is main


def main() -> None:
    previous = signal.getsignal(signal.SIGINT)
    try:
        _main()
    finally:
        if not _is_process():  # an in-process caller gets its own handler back
            signal.signal(signal.SIGINT, previous)


def _main() -> None:
    global _QUIET_UNTIL_S
    _QUIET_UNTIL_S = 0.0
    interrupts.clear_sigint()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when ignored (nohup)
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        # Not standalone: typer's own usage errors come back here to be printed as one line
        # too (standalone, typer draws them as a multi-line panel).
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
        err.print("interrupted (finished trials are saved; rerun with --resume to continue)")
        if _is_process():
            # A Ctrl-C that landed in the import machinery (a lazy import's module lock)
            # makes the interpreter's exit end in death by SIGINT, status -2 instead of 130,
            # after the line above (measured: ~1 in 30 Ctrl-Cs in the first 1.5 s). Everything
            # is saved and closed by now (the journal is appended line by line, outputs are
            # written whole or not at all): leave without the interpreter's teardown.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
