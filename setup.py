"""Builds the simulator's C kernels (tuner/sim/_kernels.c) with the package; everything else is
in pyproject.toml. The library has no Python API of its own: tuner/sim/kernels.py loads it with
ctypes, so it needs no Python headers and works with any Python 3 ABI."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tuner.sim._kernels", ["tuner/sim/_kernels.c"],
                             extra_compile_args=["-O3"])])
