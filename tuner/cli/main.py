"""Entry point: every command module registered on the one typer app, and the error handling
that turns a user error into one line and exit code 2."""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

import tuner.cli.catalogs  # noqa: F401  (registers gpus, models, workload stats)
import tuner.cli.search  # noqa: F401  (registers search)
import tuner.cli.simulate  # noqa: F401  (registers simulate)
from tuner.cli import exports, profiling, study, validation
from tuner.cli.app import app, err
from tuner.core.errors import TunerError

for _module in (exports, profiling, study, validation):
    _module.register(app)


def _error_line(message: str) -> None:
    """`error: MESSAGE` as one line: never wrapped, no markup, inner newlines folded."""
    message = " ".join(message.split())
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def main() -> None:
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
    except SystemError as exc:
        # Ctrl-C inside the compiled step loop surfaces as numba's "returned a result with an
        # exception set" wrapping the KeyboardInterrupt: an interrupt, not a crash
        if not isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            raise
        rv = 130
    except OSError as exc:  # the machine refused (disk full, permissions): one line, no trace
        where = f" ({exc.filename})" if exc.filename else ""
        _error_line(f"{exc.strerror or exc}{where}.")
        sys.exit(2)
    if rv == 130:  # typer turns Ctrl-C into exit code 130
        err.print("interrupted (finished trials are saved; rerun with --resume to continue)")
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
