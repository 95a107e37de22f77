"""Finding a profile or fit for (model, GPU, config) and turning it into a CostModel.

    predictors.sources.load_cost_model(path, model, gpu, config, mode="auto") -> CostModel

`path` is a profile directory (profile.csv + provenance.json, optionally fit.json from
`tuner fit`), a fit directory (fit.json), or a folder holding several of them (one per device
and model, e.g. predictors/data). A profile without a fresh fit.json is fitted in memory.

mode
  auto       measured where a profile was taken on this GPU at this model's shapes (tp 1,
             16-bit weights and KV); transferred from a measured GPU's efficiency curves at
             this model's shapes to this GPU's spec sheet otherwise (same-device transfer for
             tp > 1 or 8/4-bit); where no profile in the folder applies (a CPU profile, or
             another model's), the folder is set aside, said in the provenance, and the model is
             priced as without it (shipped kernel tables, their transfer, or the roofline)
  measured   use the profile at this model's shapes whatever device it was taken on (e.g. the
             shipped CPU profile of tiny-llama in CI); TunerError when there is none
  transfer   always transfer, even from a CPU profile
  roofline   ignore profiles

Every model's ``provenance`` (tuner.core.provenance.Provenance) says which it is (measured /
transferred / roofline) and from what.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from tuner.predictors.opmath import shape_dict, unconverted_shares, weight_bytes_per_param

_FIT_CACHE: dict[tuple, dict] = {}
_MODEL_CACHE: dict[tuple, object] = {}


def shipped_data_dir() -> Path:
    """predictors/data: the profiles and fits shipped with tuner."""
    return Path(__file__).resolve().parent / "data"


def find_profiles(path: Path) -> list[Path]:
    """Directories under `path` (itself, or up to two levels down) holding a profile or fit."""
    path = Path(path)
    if not path.is_dir():
        return []

    def has(p: Path) -> bool:
        return (p / "profile.csv").is_file() or (p / "fit.json").is_file()

    if has(path):
        return [path]
    found = []
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        if has(child):
            found.append(child)
        else:
            found += [g for g in sorted(q for q in child.iterdir() if q.is_dir()) if has(g)]
    return found


def _stamp(d: Path) -> tuple:
    out = []
    for name in ("profile.csv", "fit.json", "provenance.json"):
        p = d / name
        if p.is_file():
            st = p.stat()
            out.append((name, st.st_mtime_ns, st.st_size))
    return tuple(out)


def load_fit(d: Path) -> dict:
    """The fit.json document of a directory; fitted in memory (not written) when the folder
    only has a profile, or when profile.csv changed since fit.json was written."""
    from tuner.core.errors import TunerError

    d = Path(d)
    key = (str(d.resolve()), _stamp(d))
    if key in _FIT_CACHE:
        return _FIT_CACHE[key]
    fit_path = d / "fit.json"
    doc = None
    if fit_path.is_file():
        try:
            doc = json.loads(fit_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise TunerError(f"Cannot read {fit_path}: {exc}.") from None
        if doc.get("format") != "tuner-fit/1":
            raise TunerError(f"{fit_path} is not a tuner fit (format {doc.get('format')!r}).")
        csv_path = d / "profile.csv"
        if csv_path.is_file():
            from tuner.core.io import sha256_file

            if sha256_file(csv_path) != doc.get("profile_sha256"):
                doc = None  # stale: refit below
    if doc is None:
        from tuner.predictors.fit import fit_profile

        doc = fit_profile(d).to_json()
        doc["fitted_in_memory"] = True
    doc["_dir"] = str(d)
    _FIT_CACHE[key] = doc
    return doc


def _median_cv(fit: dict) -> str:
    v = fit.get("median_cv_mape")
    return f"median CV error {100 * v:.1f} %" if isinstance(v, int | float) else "CV error n/a"


def _source_label(fit: dict) -> str:
    p = fit.get("provenance", {})
    return (f"{p.get('model', '?')} on {p.get('gpu') or p.get('device_name', '?')} "
            f"({p.get('device', '?')}, {p.get('dtype', '?')}, torch {p.get('torch', '?')}, "
            f"{str(p.get('date', ''))[:10]})")


def _transfer_note(fit: dict) -> str:
    checks = fit.get("transfer_checks") or {}
    if not checks:
        return "transfer error not checked (needs a second measured device: `tuner transfer`)"
    parts = [f"{t}: {100 * c['all']['mape']:.0f} % MAPE" for t, c in checks.items()
             if c.get("all", {}).get("mape") is not None]
    return "transfer error checked against " + ", ".join(parts)


def _same_shape(fit: dict, model) -> bool:
    shp = dict(fit.get("provenance", {}).get("model_shape", {}))
    shp.pop("max_position", None)
    return shp == shape_dict(model)


def _gemm_peak(gpu, weight_bits: int) -> float | None:
    if weight_bits == 8 and getattr(gpu, "fp8_tflops", None):
        return gpu.fp8_tflops * 1e12
    if weight_bits == 4:
        return gpu.bf16_tflops * 1e12 * RooflineDefaults.w4_compute_penalty
    return None


class RooflineDefaults:
    w4_compute_penalty = 0.85


def roofline(model, gpu, config, reason: str = ""):
    from tuner.predictors.roofline import RooflineCostModel

    rf = RooflineCostModel.from_specs(gpu, model, tp=config.tp, weight_bits=config.weight_bits,
                                      kv_bits=config.kv_bits,
                                      engine=getattr(config, "engine", "vllm"))
    return dataclasses.replace(rf, name=f"{rf.name}{f' ({reason})' if reason else ''}") if reason else rf


def provenance_kind(cost_model) -> str:
    """'measured' | 'transferred' | 'calibrated' | 'roofline' (Provenance.kind) of a CostModel."""
    return cost_model.provenance.kind


def check_profile_mode(mode: str) -> None:
    """One TunerError for a mode that is not a key of PROFILE_MODES (`--profile-mode`)."""
    if mode not in PROFILE_MODES:
        from tuner.core.errors import TunerError

        raise TunerError(f"Unknown profile mode {mode!r} (--profile-mode); choose one of "
                         f"{', '.join(PROFILE_MODES)}.")


def read_profiles(profile_or_fit_dir, model, gpu, config, how: str):
    """The CostModel (or None) that ``PROFILE_READERS[how]`` makes of the profiles in
    `profile_or_fit_dir` for (model, gpu, config); cached per folder state and config. `how`:
    a --profile-mode, or one half of `auto` (predictors.sources consults the halves as two
    cost sources). Raises TunerError on a missing or empty folder."""
    path = Path(profile_or_fit_dir)
    if how in NO_PROFILE_MODES:
        return PROFILE_READERS[how](ProfileChoice([], model, gpu, config, path))
    dirs = profile_dirs(path)
    key = (tuple((str(d.resolve()), _stamp(d)) for d in dirs), tuple(shape_dict(model).items()),
           _gpu_key(gpu), config.tp, config.weight_bits, config.kv_bits, how,
           # the checkpoint's scheme: the bytes a quantized weight reads (opmath.flops_bytes)
           weight_bytes_per_param(model, config.weight_bits),
           # and its projections kept at 16 bits, priced at the 16-bit peak (fitted.py)
           unconverted_shares(model, config.weight_bits),
           # a folder set aside prices as without it: by kernel tables that see these
           getattr(config, "dp", 1), getattr(config, "expert_parallel", False))
    if key in _MODEL_CACHE:
        return _MODEL_CACHE[key]
    fits = [load_fit(d) for d in dirs]
    cm = _choose(fits, model, gpu, config, how, path)
    _MODEL_CACHE[key] = cm
    return cm


def profile_dirs(path) -> list[Path]:
    """find_profiles(path), or one TunerError: the folder does not exist, or holds no
    profile or fit (the same words for every command that reads a --profile folder)."""
    from tuner.core.errors import TunerError

    path = Path(path)
    if not path.exists():
        raise TunerError(f"Profile folder {path} does not exist (make one with `tuner profile`).")
    dirs = find_profiles(path)
    if not dirs:
        raise TunerError(f"{path} holds no profile (profile.csv) or fit (fit.json): run "
                         f"`tuner profile --model M --out {path}`.")
    return dirs


def _gpu_key(gpu) -> tuple:
    return tuple(getattr(gpu, k, None) for k in ("name", "bf16_tflops", "fp32_tflops", "hbm_gbps",
                                                  "host_link_gbps", "fp8_tflops", "nvlink_gbps"))


@dataclass
class ProfileChoice:
    """The profiles (fits) found for one (model, GPU, config), and the two ways to make a
    CostModel from one of them; the profile modes (PROFILE_MODES) choose between them."""

    fits: list[dict]
    model: object
    gpu: object
    config: object
    path: Path

    @property
    def plain(self) -> bool:
        """The shapes profiles are taken at: tp 1, 16-bit weights and KV."""
        c = self.config
        return c.tp == 1 and c.weight_bits == 16 and c.kv_bits == 16

    @property
    def same(self) -> list[dict]:
        """Fits taken at this model's shapes."""
        return [f for f in self.fits if _same_shape(f, self.model)]

    @property
    def on_gpu(self) -> list[dict]:
        """Fits at this model's shapes taken on this GPU."""
        name = self.gpu.name.lower()
        return [f for f in self.same if name in (
            str(f.get("provenance", {}).get("gpu") or "").lower(),
            str(f.get("provenance", {}).get("device_name") or "").lower())]

    def tp_bits(self) -> str:
        c = self.config
        return f"tp={c.tp}, W{c.weight_bits}/KV{c.kv_bits}"

    def measured(self, f: dict, note: str = ""):
        from tuner.predictors.fitted import measured_cost_model

        desc = (f"measured: {_source_label(f)}, per-operation fits from {f['_dir']}; "
                f"{_median_cv(f)}{note}")
        return measured_cost_model(f, self.model, description=desc)

    def transferred(self, f: dict, specs=None, *, dtype_bytes: float = 2.0,
                    what: str | None = None):
        """`f`'s efficiency curves on `specs` (default: this GPU's spec sheet); a profile of
        another model's shapes (--profile-mode transfer) says so."""
        from tuner.core.errors import TunerError
        from tuner.predictors.devices import gpu_specs
        from tuner.predictors.fitted import transferred_cost_model

        gpu, c = self.gpu, self.config
        specs = specs or gpu_specs(gpu, "bfloat16")
        other = "" if _same_shape(f, self.model) else (
            f"; profiled at {f.get('provenance', {}).get('model', 'another model')}'s shapes, "
            f"not {self.model.name}'s")
        desc = (f"transferred to {what or gpu.name} from {_source_label(f)} via efficiency "
                f"curves and the {specs.name} {'spec sheet' if specs.kind == 'cuda' else 'peaks'}"
                f"; {_transfer_note(f)}{other}")
        try:
            return transferred_cost_model(
                f, self.model, specs, description=desc, dtype_bytes=dtype_bytes, tp=c.tp,
                weight_bits=c.weight_bits, kv_bits=c.kv_bits,
                gemm_peak_flops=_gemm_peak(gpu, c.weight_bits),
                interconnect_bytes_per_s=gpu.interconnect_bytes_per_s)
        except ValueError as exc:
            raise TunerError(f"Cannot transfer from {f['_dir']}: {exc}.") from None


def _mode_measured(ch: ProfileChoice):
    """The profile at this model's shapes whatever device it was taken on."""
    from tuner.core.errors import TunerError
    from tuner.predictors.devices import DeviceSpecs

    if not ch.same:
        have = sorted({f.get("provenance", {}).get("model", "?") for f in ch.fits})
        name = ch.model.name
        raise TunerError(f"No profile in {ch.path} was taken at {name}'s shapes (it has "
                         f"{', '.join(have)}); profile it with `tuner profile --model {name}`.")
    on_gpu = ch.on_gpu
    f = (on_gpu or ch.same)[0]
    if ch.plain:
        note = "" if f in on_gpu else f" (used as {ch.gpu.name}: --profile-mode measured)"
        return ch.measured(f, note)
    specs = DeviceSpecs.from_dict(f["specs"])
    eb = 4.0 if f.get("provenance", {}).get("dtype") == "float32" else 2.0
    return ch.transferred(f, specs, dtype_bytes=eb, what=f"{specs.name} at {ch.tp_bits()}")


def _mode_transfer(ch: ProfileChoice):
    """Always transfer, even from a CPU profile."""
    return ch.transferred(_pick_source(ch.fits, ch.model, gpu_only=False))


def _auto_measured(ch: ProfileChoice):
    """`auto`'s first half: a profile taken on this GPU at this model's shapes, used as
    measured where the config is the one profiles are taken at (tp 1, 16-bit); else None."""
    on_gpu = ch.on_gpu
    return ch.measured(on_gpu[0]) if on_gpu and ch.plain else None


def _auto_transferred(ch: ProfileChoice):
    """`auto`'s second half (after _auto_measured): this GPU's own profile carried to the
    config's tp / bits, else a GPU profile at this model's shapes transferred to this GPU;
    None where none applies (another model's efficiency curves are not this model's: a tiny
    model's launch-bound kernels would price a large one several times too slow)."""
    on_gpu = ch.on_gpu
    if on_gpu:
        return ch.transferred(on_gpu[0], what=f"{ch.gpu.name} at {ch.tp_bits()}")
    src = _pick_source(ch.same, ch.model, gpu_only=True)
    return ch.transferred(src) if src is not None else None


def no_profile_applies(path, gpu, model=None) -> str:
    """Why `auto` set a --profile folder aside (the cost model's provenance says it)."""
    shapes = f" at {model.name}'s shapes" if model is not None else ""
    return f"no GPU profile in {path} applies to {gpu.name}{shapes}"


def set_aside_note(path, gpu, model) -> str:
    """What a cost model priced as without a --profile folder that does not apply says."""
    return f"--profile set aside ({no_profile_applies(path, gpu, model)}): priced as without it"


class NotedCostModel:
    """A CostModel with a note added to its provenance (a --profile folder set aside); every
    figure and member is the base model's."""

    def __init__(self, base, note: str):
        self.base = base
        self.note = note

    def __getattr__(self, name: str):
        if name in ("base", "note"):  # not set yet (copy / unpickle): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)

    @property
    def provenance(self):
        p = self.base.provenance
        return dataclasses.replace(p, detail=f"{p.detail}; {self.note}")

    def describe(self) -> str:
        return str(self.provenance)

    @property
    def transfer_model(self):
        return self.base.transfer_model

    def iteration_time_s(self, f):
        return self.base.iteration_time_s(f)

    def breakdown(self, f):
        return self.base.breakdown(f)

    def breakdown_ops(self, f):
        return self.base.breakdown_ops(f)

    def layer_time_s(self, f):
        return self.base.layer_time_s(f)

    def decode_attention_layer_s(self, f):
        return self.base.decode_attention_layer_s(f)


def _mode_auto(ch: ProfileChoice):
    """Measured on this GPU, else transferred from a GPU profile at this model's shapes,
    else (the folder set aside, said in the provenance) what auto gives without a folder."""
    for half in (_auto_measured, _auto_transferred):
        cm = half(ch)
        if cm is not None:
            return cm
    return None  # predictors.sources.load_cost_model then prices as without the folder


def _mode_roofline(ch: ProfileChoice):
    """The spec-sheet roofline; profiles ignored."""
    return roofline(ch.model, ch.gpu, ch.config)


#: --profile-mode NAME -> how a CostModel is made from the profiles found (see the module
#: docstring); adding a way is one function and one entry.
PROFILE_MODES = {
    "auto": _mode_auto,
    "measured": _mode_measured,
    "transfer": _mode_transfer,
    "roofline": _mode_roofline,
}
MODES = tuple(PROFILE_MODES)
NO_PROFILE_MODES = ("roofline",)  # modes that read no profile (no folder needed)
#: read_profiles(how=...): the modes, and the two halves of `auto` (None where they do not
#: apply) that predictors.sources consults as the "profile" and "transfer" cost sources
PROFILE_READERS = {**PROFILE_MODES, "auto-measured": _auto_measured,
                   "auto-transferred": _auto_transferred}


def _choose(fits: list[dict], model, gpu, config, how: str, path: Path):
    from tuner.core.errors import TunerError

    try:
        return PROFILE_READERS[how](ProfileChoice(fits, model, gpu, config, path))
    except ValueError as exc:
        raise TunerError(f"Cannot build a cost model from {path}: {exc}.") from None


def _pick_source(fits: list[dict], model, *, gpu_only: bool):
    """The fit to transfer from: GPU profiles first, then those at the model's shapes, then
    those whose transfer error was checked."""
    pool = [f for f in fits if f.get("provenance", {}).get("device") == "cuda"]
    if not pool and not gpu_only:
        pool = list(fits)
    if not pool:
        return None
    return sorted(pool, key=lambda f: (not _same_shape(f, model),
                                       not f.get("transfer_checks")))[0]


def shipped_cost_model(model, gpu, config):
    """A measured CostModel from the profiles shipped in predictors/data when one was taken on
    this GPU at this model's shapes (tp 1, 16-bit); None otherwise (callers use the roofline)."""
    d = shipped_data_dir()
    if not (config.tp == 1 and config.weight_bits == 16 and config.kv_bits == 16):
        return None
    idx = _shipped_index()
    hits = [p for p, prov in idx if str(prov.get("gpu") or "").lower() == gpu.name.lower()
            and {k: v for k, v in prov.get("model_shape", {}).items() if k != "max_position"}
            == shape_dict(model)]
    if not hits or not d.is_dir():
        return None
    return read_profiles(hits[0], model, gpu, config, "auto-measured")


_SHIPPED: list | None = None


def _shipped_index() -> list[tuple[Path, dict]]:
    global _SHIPPED
    if _SHIPPED is None:
        out = []
        for p in find_profiles(shipped_data_dir()):
            for name in ("provenance.json", "fit.json"):
                f = p / name
                if f.is_file():
                    try:
                        doc = json.loads(f.read_text())
                    except (OSError, json.JSONDecodeError):
                        continue
                    out.append((p, doc if name == "provenance.json" else doc.get("provenance", {})))
                    break
        _SHIPPED = out
    return _SHIPPED


def record_transfer_check(source_dir: Path, target_name: str, result: dict) -> Path | None:
    """Store a transfer error in the source's fit.json (cited by transferred models' describe())."""
    p = Path(source_dir) / "fit.json"
    if not p.is_file():
        return None
    doc = json.loads(p.read_text())
    doc.setdefault("transfer_checks", {})[target_name] = result
    tmp = p.with_name("fit.json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(p)
    _FIT_CACHE.clear()
    _MODEL_CACHE.clear()
    return p
