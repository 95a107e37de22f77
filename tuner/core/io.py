"""The one atomic writer and the one JSON encoder of the project.

Every file tuner writes goes through :func:`write_atomic` (a temp file in the same folder, fsync,
``os.replace``): a reader sees the old file or the whole new one, and a failure or Ctrl-C leaves
no partial file. Every JSON document goes through :func:`jsonable` / :func:`dumps`: numpy scalars
and arrays unwrapped, non-finite floats written as null (JSON has no NaN), paths as strings.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's bytes, read in chunks (raises OSError)."""
    import hashlib  # ~4 ms (OpenSSL): only the commands that hash a file pay it

    with Path(path).open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def jsonable(obj: Any) -> Any:
    """Plain JSON types: numpy scalars/arrays unwrapped, non-finite floats -> None, dataclasses
    (ServingConfig, Provenance, ...) by their ``to_dict()`` or fields, paths as strings."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        to_dict = getattr(type(obj), "to_dict", None)
        return jsonable(to_dict(obj) if to_dict else dataclasses.asdict(obj))
    if hasattr(obj, "tolist"):  # numpy scalar or array
        return jsonable(obj.tolist())
    return str(obj)


def dumps(obj: Any, indent: int | None = 2) -> str:
    """``obj`` as a JSON document (via :func:`jsonable`), newline-terminated."""
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False) + "\n"


def write_atomic(path: str | Path, data: str | bytes | Callable[[Path], None]) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``. ``data``
    is text, bytes, or a function that writes the temp path itself (e.g. ``joblib.dump``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, mode)  # mkstemp creates 0600; keep the usual permissions of a written file
        if callable(data):
            os.close(fd)
            data(Path(tmp))
        else:
            binary = isinstance(data, bytes)
            with os.fdopen(fd, "wb" if binary else "w",
                           **({} if binary else {"encoding": "utf-8", "newline": "\n"})) as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.errno and exc.filename is None:
            # a failed write (disk full, file too large) names no file: say which one
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    return path


def read_shipped(name: str) -> str:
    """A data file tuner ships in tuner/core/data (`name` relative to it: "gpus.yaml",
    "configs/x.json"). Read from the package folder: importlib.resources (~2 ms to import)
    answers the same for a package installed as files, as setuptools installs it."""
    return (Path(__file__).parent / "data" / name).read_text(encoding="utf-8")


def user_cache_dir(*parts: str) -> Path:
    """A folder under the user's cache ($XDG_CACHE_HOME or ~/.cache)/tuner (not created)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base, "tuner", *parts)


def load_shipped_yaml(text: str):
    """A YAML file tuner ships (its catalogs), parsed once per content and kept as JSON in the
    user's cache (catalogs/): importing PyYAML alone takes ~20 ms (its reader compiles a large
    regex), most of what a `tuner simulate` spent on its catalogs (issue #29 item 3). Keyed by
    the text's length and CRC-32, so an edited catalog is parsed again; a cache that cannot be
    read or written is passed by. Parsed with libyaml's C loader where PyYAML has it (~10x the
    pure-Python one); same safe schema. Users' files keep yaml.safe_load and its messages."""
    import zlib  # loaded already by numpy

    raw = text.encode("utf-8")
    cached = user_cache_dir("catalogs") / f"{len(raw)}-{zlib.crc32(raw):08x}.json"
    try:
        return json.loads(cached.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    import yaml

    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    try:
        encoded = json.dumps(data)
        if json.loads(encoded) == data:  # only what JSON keeps as it is (no dates, int keys)
            write_atomic(cached, encoded)
    except (OSError, TypeError, ValueError):
        pass
    return data
