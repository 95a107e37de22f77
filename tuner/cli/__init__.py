"""The `tuner` command line: the only layer that knows about terminals.

A Ctrl-C in the first second of `tuner ...`, while the command line is still being imported,
ended in a KeyboardInterrupt traceback from the import machinery: the CLI's own handler
(tuner.cli.main) is installed only once its imports are done. Until then, for the `tuner`
process only (not a Python that imports tuner.cli: tests, notebooks), :func:`early_sigint`
prints the one line and exits 130; nothing has been read or written yet."""

import os as _os
import signal as _signal
import sys as _sys


def early_sigint(signum, frame) -> None:
    """Ctrl-C before tuner.cli.main's handler is in place: one line, exit 130."""
    try:
        _os.write(2, b"interrupted\n")
    finally:
        _os._exit(130)


def _is_tuner_process() -> bool:
    """The `tuner` console script, or `python -m tuner.cli` (whose argv[0] is '-m' while its
    packages are imported)."""
    main_file = getattr(_sys.modules.get("__main__"), "__file__", None) or ""
    name = _os.path.basename(main_file).removesuffix(".exe")
    return name == "tuner" or _sys.argv[:1] == ["-m"]


# not when SIGINT is ignored (nohup, a background job of a script): it stays ignored
if _is_tuner_process() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, early_sigint)
