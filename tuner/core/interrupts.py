"""Whether the user pressed Ctrl-C: the CLI's SIGINT handler marks it, and every layer that
cleans up after an error asks here (the CLI, to print one line and exit 130; the search's
storage, to keep an interrupted study for --resume).

The exception alone cannot tell: C code that calls back into Python can swallow the
KeyboardInterrupt and fail its own way (numpy's structured-array comparison, inside Optuna's
Pareto ranking, raises an unchained TypeError). A signal is process-wide, so is this flag.
"""

from __future__ import annotations

_state = {"sigint": False}


def mark_sigint() -> None:
    """The SIGINT handler saw a Ctrl-C."""
    _state["sigint"] = True


def clear_sigint() -> None:
    """A command starts: no Ctrl-C yet."""
    _state["sigint"] = False


def sigint_seen() -> bool:
    return _state["sigint"]


def is_interrupt(exc: BaseException | None) -> bool:
    """Ctrl-C: a KeyboardInterrupt in the error's short chain (what it was raised from), or any
    error after the handler saw one."""
    if sigint_seen():
        return True
    for _ in range(8):
        if exc is None:
            return False
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
