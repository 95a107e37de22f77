"""Search spaces: YAML files of ServingConfig knobs (data, not code)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

import yaml

from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError

_FIELDS = {f.name: f for f in dataclasses.fields(ServingConfig)}


@dataclass(frozen=True)
class SearchSpace:
    knobs: dict[str, list]  # field -> candidate values (order kept)
    fixed: dict[str, object]
    source: str

    def grid(self, gpus: list[str]):
        """Every configuration of the space (for --exhaustive and tests)."""
        for params in self.grid_params(gpus):
            yield ServingConfig(**self.fixed, **params)

    def grid_params(self, gpus: list[str]):
        """Every point of the space as the search's parameter dict ({'gpu': ..., knob: value})."""
        names = list(self.knobs)
        for gpu in gpus:
            for combo in itertools.product(*(self.knobs[k] for k in names)):
                yield {"gpu": gpu, **dict(zip(names, combo, strict=True))}

    def size(self, n_gpus: int) -> int:
        n = n_gpus
        for v in self.knobs.values():
            n *= len(v)
        return n


def shipped_space_path(name: str) -> Path:
    """A search space shipped with tuner (the `search_spaces` package data), by file or bare
    name: "default", "offload.yaml"."""
    from importlib.resources import files

    fname = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    # The package is installed as files (not zipped), so its resources are plain paths.
    path = Path(str(files("search_spaces") / fname))
    if not path.is_file():
        raise TunerError(f"No search space {fname!r} is shipped with tuner (shipped: "
                         f"{', '.join(shipped_space_names())}); pass --space FILE.")
    return path


def shipped_space_names() -> list[str]:
    from importlib.resources import files

    return sorted(p.name for p in files("search_spaces").iterdir() if p.name.endswith(".yaml"))


def default_space_path() -> Path:
    """search_spaces/default.yaml, installed with the package."""
    return shipped_space_path("default.yaml")


def load_space(path: str | Path | None = None) -> SearchSpace:
    """A search space from a YAML file, or a shipped one by name ("offload"); None: the default."""
    if path is None:
        path = default_space_path()
    path = Path(path)
    if not path.is_file():
        if path.parent == Path(".") and path.stem in {Path(n).stem for n in shipped_space_names()}:
            path = shipped_space_path(path.name)
        else:
            raise TunerError(f"Search space {path} does not exist (shipped spaces, by name: "
                             f"{', '.join(Path(n).stem for n in shipped_space_names())}).")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise TunerError(f"{path}: not valid YAML ({' '.join(str(exc).split())}).") from None
    if raw is None:  # an empty file is a mistake, not "search the GPUs at the defaults"
        raise TunerError(f"{path}: empty; a search space has a 'knobs:' section (knob: list of "
                         "values) and/or a 'fixed:' one (knob: value).")
    if not isinstance(raw, dict):
        raise TunerError(f"{path}: expected a mapping with 'knobs:' and 'fixed:' sections.")
    unknown = set(raw) - {"knobs", "fixed"}
    if unknown:
        raise TunerError(f"{path}: unknown section(s) {', '.join(map(repr, sorted(unknown)))}; "
                         "a search space has only 'knobs:' and 'fixed:'.")
    knobs = raw.get("knobs") or {}
    fixed = raw.get("fixed") or {}
    for section, value in (("knobs", knobs), ("fixed", fixed)):
        if not isinstance(value, dict):
            raise TunerError(f"{path}: '{section}:' must be a mapping of knob names to "
                             f"{'lists of values' if section == 'knobs' else 'values'}.")
    for name in list(knobs) + list(fixed):
        if name not in _FIELDS or name == "gpu":
            raise TunerError(
                f"{path}: {name!r} is not a knob (choose from "
                f"{', '.join(n for n in _FIELDS if n != 'gpu')}; GPUs come from --gpus).")
    for name, values in knobs.items():
        if not isinstance(values, list) or not values:
            raise TunerError(f"{path}: knob {name!r} needs a non-empty list of values.")
    overlap = set(knobs) & set(fixed)
    if overlap:
        raise TunerError(f"{path}: {', '.join(sorted(overlap))} both searched and fixed.")
    # Validate each value through ServingConfig so a typo fails before the search starts.
    probe = {k: v[0] for k, v in knobs.items()} | dict(fixed)
    checks = [(n, v) for n, vs in knobs.items() for v in vs] + list(fixed.items())
    for name, v in checks:
        if not _type_ok(name, v):
            raise TunerError(f"{path}: {name}={v!r}: expected {_FIELDS[name].type}.")
    for name, v in checks:
        try:
            ServingConfig(gpu="probe", **(probe | {name: v}))
        except (TunerError, TypeError) as exc:
            raise TunerError(f"{path}: {name}={v!r}: {exc}") from None
    return SearchSpace(knobs=dict(knobs), fixed=dict(fixed), source=str(path))


def _type_ok(name: str, value: object) -> bool:
    """YAML values against the ServingConfig field's type (int, float, str or bool)."""
    kind = _FIELDS[name].type
    kind = getattr(kind, "__name__", kind)  # "int" under postponed annotations, else int
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    if kind == "float":
        return isinstance(value, int | float)
    return isinstance(value, str)
