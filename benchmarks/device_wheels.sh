#!/usr/bin/env bash
# Run HERE (a machine with PyPI), before a `run` of benchmarks/on_device.sh on the lent H200:
# downloads into .whl/ the wheels of what `tuner profile`, `tuner fit` and `tuner search` import
# that the lent machine's image does not hold, for its Python (CPython 3.12, x86-64 manylinux).
# The machine reaches no registry, so these travel with the call (`carry: [".whl"]`) and
# on_device.sh installs them with `pip install --no-index --no-deps --target /tmp/site`.
#
#   bash benchmarks/device_wheels.sh              (DRY_RUN=1: print the pip command only)
#
# What the image lacks (its package list: the workplace's device notes, KINDS.md): optuna and
# its alembic, sqlalchemy, colorlog and Mako (search), plotly (the search's HTML report), and
# typer below 0.29 (pyproject's cap; the image's typer version is unknown, so 0.28 travels and
# is put first). Everything else tuner needs (numpy, pandas, scikit-learn, rich, pyyaml, jinja2,
# huggingface_hub, torch; tqdm, narwhals, MarkupSafe, shellingham, annotated-doc under these)
# is there. Versions: the ones this project's tests run against (.venv, 2026-11).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
DEST=.whl
WHEELS=(optuna==5.0.0 alembic==1.20.1 sqlalchemy==2.1.9 colorlog==6.12.0 mako==1.4.3
        plotly==7.1.0 typer==0.28.0)
# Names the image holds (KINDS.md's list, the part these wheels need): the closure check below
# fails if a wheel needs something neither here nor downloaded.
ON_IMAGE="numpy pandas scikit-learn scipy joblib threadpoolctl rich markdown-it-py mdurl pygments
click shellingham annotated-doc typing-extensions pyyaml jinja2 markupsafe huggingface-hub
filelock fsspec packaging tqdm narwhals torch"
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64)
CMD=("$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12
     --implementation cp "${PLATFORMS[@]}" -d "$DEST" "${WHEELS[@]}")
if [ -n "${DRY_RUN:-}" ]; then echo "+ ${CMD[*]}"; exit 0; fi

# never committed: ignored by .gitignore, and by this clone's exclude file in case that changes
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p "$DEST"
rm -f "$DEST"/*.whl "$DEST"/_kernels.so  # one version of each: two stop the install there
"${CMD[@]}"
# The simulator's C kernels, for a device image without a C compiler (on_device.sh uses this only
# then): a plain C library loaded by ctypes, so no Python ABI; glibc here (2.36) <= there (2.39).
# Same flags as tuner/sim/kernels.py's own build.
${CC:-cc} -O3 -shared -fPIC -o "$DEST/_kernels.so" tuner/sim/_kernels.c

"$PY" - "$DEST" "$ON_IMAGE" <<'PY'
"""List the wheels with their sizes; check that every requirement (evaluated for CPython 3.12
on x86-64 Linux) is either downloaded or on the image."""
import sys
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

dest, on_image = Path(sys.argv[1]), {canonicalize_name(n) for n in sys.argv[2].split()}
env = default_environment() | {"python_version": "3.12", "python_full_version": "3.12.3",
                               "sys_platform": "linux", "platform_system": "Linux",
                               "platform_machine": "x86_64", "implementation_name": "cpython",
                               "os_name": "posix", "extra": ""}
wheels = sorted(dest.glob("*.whl"))
have = {canonicalize_name(parse_wheel_filename(w.name)[0]) for w in wheels}
missing, total_bytes = [], 0
for w in wheels:
    total_bytes += w.stat().st_size
    print(f"{w.stat().st_size / 2**20:7.2f} MiB  {w.name}")
    with zipfile.ZipFile(w) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is not None and not req.marker.evaluate(env):
                continue  # an extra, another platform or an older Python
            name = canonicalize_name(req.name)
            if name not in have and name not in on_image:
                missing.append(f"{w.name}: {req}")
total_bytes += sum(f.stat().st_size for f in dest.glob("*.so"))
print(f"{len(wheels)} wheels and the kernels, {total_bytes / 2**20:.2f} MiB in {dest}/ "
      "(a device call carries 64 MiB with the working tree)")
if missing:
    print("needed but neither downloaded nor on the image:\n  " + "\n  ".join(missing))
    sys.exit(1)
PY
