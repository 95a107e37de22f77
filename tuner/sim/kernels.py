"""Loads the simulator's C kernels (tuner/sim/_kernels.c) with ctypes.

`pip install` builds the library next to this file (setup.py). A source tree used without
installing (PYTHONPATH=checkout) builds it once into the user's cache with the system C
compiler, keyed by the source's hash. Loading takes about a millisecond, against numba's
~0.7 s per process, and nothing compiles at run time.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.io import user_cache_dir

_HERE = Path(__file__).resolve().parent
_SOURCE = _HERE / "_kernels.c"
_I64P = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
_I32P = np.ctypeslib.ndpointer(dtype=np.int32, flags="C_CONTIGUOUS")
_F64P = np.ctypeslib.ndpointer(dtype=np.float64, flags="C_CONTIGUOUS")
_I8P = np.ctypeslib.ndpointer(dtype=np.int8, flags="C_CONTIGUOUS")
_I64 = ctypes.c_int64


def _built_library() -> Path | None:
    """The library setup.py built beside this file (an install or `pip install -e`)."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = _HERE / f"_kernels{suffix}"
        if path.is_file():
            return path
    return None


def _cache_dir() -> Path:
    return user_cache_dir("kernels")


def _compile_into_cache() -> Path:
    """Build the library from source once into the user's cache (a checkout run in place)."""
    import hashlib

    digest = hashlib.sha256(_SOURCE.read_bytes()).hexdigest()[:16]
    target = _cache_dir() / f"_kernels-{digest}.so"
    if target.is_file():
        return target
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise TunerError("the simulator's C kernels are not built and no C compiler was found: "
                         "install tuner with `pip install .` (it builds them), or install a C "
                         "compiler (e.g. `apt-get install gcc`)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so")
    os.close(fd)
    try:
        subprocess.run([cc, "-O3", "-shared", "-fPIC", "-o", tmp, str(_SOURCE)], check=True,
                       capture_output=True, text=True)
        os.replace(tmp, target)  # whole or not at all: concurrent processes may race here
    except subprocess.CalledProcessError as exc:
        raise TunerError(f"building the simulator's C kernels with {cc} failed: "
                         f"{exc.stderr.strip().splitlines()[-1] if exc.stderr else exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def check_layout(lib: ctypes.CDLL, expected: list[int], function: str = "tk_layout") -> None:
    """The C file numbers the state's columns too (tk_layout for the vLLM loop,
    tk_sglang_layout for SGLang's): refuse a library that disagrees with the Python side (a
    stale build) rather than scramble a schedule."""
    got = np.zeros(len(expected) + 8, dtype=np.int64)
    n = getattr(lib, function)(got, got.shape[0])
    if n != len(expected) or got[:n].tolist() != expected:
        raise _stale(lib._name)


def _stale(path) -> TunerError:
    return TunerError(f"the simulator's C kernels ({path}) do not match this version of tuner: "
                      "reinstall it (`pip install .`)")


@cache
def library() -> ctypes.CDLL:
    """The loaded kernels, with their argument types declared."""
    path = _built_library() or _compile_into_cache()
    lib = ctypes.CDLL(str(path))
    try:
        _declare(lib)
    except AttributeError:  # a build older than this source lacks a function
        raise _stale(path) from None
    return lib


def _declare(lib: ctypes.CDLL) -> None:
    """The C functions' argument and result types."""
    lib.tk_layout.argtypes = [_I64P, _I64]
    lib.tk_layout.restype = _I64
    lib.tk_run.argtypes = [_I64P, _I32P, _I64, _I32P, _I32P, _I64, _I64P, _I64P, _I64, _I64,
                           _I64P, _I64, _I64, _I64, _I64P, _I64P, _I64, _I32P]
    lib.tk_run.restype = _I64
    lib.tk_sglang_layout.argtypes = [_I64P, _I64]
    lib.tk_sglang_layout.restype = _I64
    lib.tk_sglang_run.argtypes = [_I64P, _F64P, _I32P, _I64, _I32P, _I32P, _I64, _I64P, _F64P,
                                  _I64P, _I64, _I64, _I64P, _I64, _I64, _I64, _I64P, _I64]
    lib.tk_sglang_run.restype = _I64
    lib.tk_first_fit.argtypes = [_I64P, _I64, _I64, _I64, _I64, _I64P, _I64P, _I64P]
    lib.tk_first_fit.restype = None
    lib.tk_dual_scan.argtypes = [_I64P, _I64, _F64P, _F64P, ctypes.c_double, _I64, _I64, _I64P,
                                 _I8P]
    lib.tk_dual_scan.restype = None
    lib.tk_least_loaded.argtypes = [_I64P, _I64P, _I64, _I64, _I64P, _I64P]
    lib.tk_least_loaded.restype = None
