"""GPU and model catalogs: plain dataclasses loaded from YAML data files shipped in tuner/data."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from importlib import resources
from pathlib import Path

import yaml

from tuner.core.errors import TunerError, close_matches_hint

GIB = 1024**3


@dataclass(frozen=True)
class GPU:
    """Spec-sheet figures of one GPU type plus its on-demand price (with source and date)."""

    name: str
    memory_gib: float
    bf16_tflops: float  # dense (no sparsity)
    fp32_tflops: float
    hbm_gbps: float  # GB/s (10^9 bytes/s)
    pcie_gen: int
    host_link_gbps: float  # realistic one-direction host<->device copy bandwidth, GB/s
    host_ram_gib: float  # typical host RAM per GPU in cloud offerings
    cpu_cores: int  # typical vCPUs per GPU in cloud offerings
    tdp_w: float
    price_usd_per_h: float
    price_source: str
    price_date: str
    fp8_tflops: float | None = None  # dense; None where the GPU has no FP8 tensor cores
    int8_tops: float | None = None  # dense
    nvlink_gbps: float | None = None  # per-GPU NVLink bandwidth (one direction), None = PCIe only
    vasuki_usd_per_fp32_gflop_per_w: float | None = None  # Vasuki Table 1 (A10, A40 only)
    notes: str = ""

    def __post_init__(self) -> None:
        # a zero, negative or non-finite spec or price would divide by zero or turn every $
        # into nan far from where it was typed (--price, --gpu-file)
        for name in ("memory_gib", "bf16_tflops", "fp32_tflops", "hbm_gbps", "host_link_gbps",
                     "price_usd_per_h"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise TunerError(f"GPU {self.name}: {name} must be a positive finite number, "
                                 f"got {value!r}.")

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    @property
    def peak_flops(self) -> float:
        return self.bf16_tflops * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * 1e9

    @property
    def host_link_bytes_per_s(self) -> float:
        return self.host_link_gbps * 1e9

    @property
    def interconnect_bytes_per_s(self) -> float:
        """Bandwidth for tensor-parallel all-reduce: NVLink when present, else the PCIe link."""
        return (self.nvlink_gbps or self.host_link_gbps) * 1e9


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a Llama/Mistral/Qwen-style decoder (GQA, gated MLP)."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position: int = 4096
    tie_embeddings: bool = False
    hf_id: str = ""  # Hugging Face repo id, written into deploy exports
    source: str = "catalog"

    # --- parameter counts -------------------------------------------------------------
    @property
    def linear_params_per_layer(self) -> int:
        """Weights of the per-layer matmuls (QKV, O, gate, up, down)."""
        q = self.hidden_size * self.num_heads * self.head_dim
        kv = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        o = self.num_heads * self.head_dim * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size
        return q + kv + o + mlp

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        norms = (2 * self.num_layers + 1) * self.hidden_size
        head = 0 if self.tie_embeddings else self.lm_head_params
        return self.num_layers * self.linear_params_per_layer + self.embedding_params + head + norms

    # --- bytes ---------------------------------------------------------------------------
    def linear_weight_bytes_per_layer(self, bits: int) -> float:
        """Bytes of one layer's matmul weights at `bits`; 4/8-bit carry group-wise fp16 scale +
        zero per 128 weights (group-wise min-max as in LM-Offload Alg. 2)."""
        overhead = 0.0 if bits == 16 else 4.0 / 128.0
        return self.linear_params_per_layer * (bits / 8.0 + overhead)

    def weight_bytes(self, bits: int) -> float:
        """All weights; embeddings and LM head stay 16-bit (as in vLLM's AWQ/GPTQ/FP8 paths)."""
        head = 0 if self.tie_embeddings else self.lm_head_params
        norms = (2 * self.num_layers + 1) * self.hidden_size
        return self.num_layers * self.linear_weight_bytes_per_layer(bits) + 2.0 * (
            self.embedding_params + head + norms
        )

    def kv_bytes_per_token(self, bits: int, layers: int | None = None) -> float:
        """K and V of one token over `layers` layers (default all) at `bits`."""
        n = self.num_layers if layers is None else layers
        return 2.0 * n * self.num_kv_heads * self.head_dim * bits / 8.0


# ---------------------------------------------------------------------------------------
# Loading


def _load_yaml_resource(filename: str) -> dict:
    text = resources.files("tuner.core").joinpath("data", filename).read_text()
    return yaml.safe_load(text)


def _gpu_from_dict(name: str, d: dict, where: str) -> GPU:
    known = {f.name for f in fields(GPU)}
    unknown = set(d) - known
    if unknown:
        raise TunerError(f"{where}: unknown field(s) for GPU {name!r}: {', '.join(sorted(unknown))}.")
    try:
        return GPU(name=name, **{k: v for k, v in d.items() if k != "name"})
    except TypeError as exc:
        raise TunerError(f"{where}: GPU {name!r} is missing fields ({exc}).") from None


def load_gpus(extra_yaml: str | Path | None = None) -> dict[str, GPU]:
    """The shipped GPU catalog, plus GPUs from a user YAML (same schema: name -> fields)."""
    raw = _load_yaml_resource("gpus.yaml")["gpus"]
    gpus = {name: _gpu_from_dict(name, d, "tuner/data/gpus.yaml") for name, d in raw.items()}
    if extra_yaml is not None:
        path = Path(extra_yaml)
        if not path.is_file():
            raise TunerError(f"GPU file {path} does not exist.")
        try:
            user = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise TunerError(f"{path}: not valid YAML ({exc}).") from None
        user = user.get("gpus", user)
        for name, d in user.items():
            base = gpus.get(name)
            if base is not None:  # partial override of a shipped GPU
                gpus[name] = _gpu_from_dict(name, {**asdict(base), **(d or {})}, str(path))
            else:
                gpus[name] = _gpu_from_dict(name, d, str(path))
    return gpus


def parse_price_overrides(items: list[str] | None) -> dict[str, float]:
    """['A10=0.75', 'A40=1.1'] -> {'A10': 0.75, 'A40': 1.1}."""
    out: dict[str, float] = {}
    for item in items or []:
        for part in item.split(","):
            if not part.strip():
                continue
            name, sep, value = part.partition("=")
            try:
                price = float(value)
            except ValueError:
                price = -1.0
            if not sep or not (math.isfinite(price) and price > 0):
                raise TunerError(f"--price expects GPU=USD_PER_HOUR with a positive price "
                                 f"(e.g. A10=0.75), got {part!r}.")
            out[name.strip()] = price
    return out


def apply_prices(gpus: dict[str, GPU], prices: dict[str, float]) -> dict[str, GPU]:
    out = dict(gpus)
    for name, price in prices.items():
        gpu = get_gpu(name, out)
        out[gpu.name] = replace(gpu, price_usd_per_h=price, price_source="user override (--price)",
                                price_date="")
    return out


def get_gpu(name: str, gpus: dict[str, GPU]) -> GPU:
    """Look a GPU up case-insensitively; unknown names raise with close matches."""
    for key, gpu in gpus.items():
        if key.lower() == name.strip().lower():
            return gpu
    raise TunerError(f"Unknown GPU {name!r}.{close_matches_hint(name, gpus)} (`tuner gpus` lists them; add more with --gpu-file.)")


def load_models() -> dict[str, ModelSpec]:
    raw = _load_yaml_resource("models.yaml")["models"]
    return {name: ModelSpec(name=name, **d) for name, d in raw.items()}


def _config_int(cfg: dict, key: str, path: Path, default: int | None = None) -> int:
    """A positive integer field of a config.json, or one TunerError naming it and its value."""
    if key not in cfg or cfg[key] is None:
        if default is None:
            raise TunerError(f"{path}: not a Llama-style decoder config (missing {key!r}).")
        return default
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) \
            or int(value) <= 0:
        raise TunerError(f"{path}: {key} must be a positive integer, got {value!r}.")
    return int(value)


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (file or directory holding one); every shape
    field is checked (a positive integer, heads divisible by KV heads) with one clear error."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TunerError(f"Cannot read model config {path}: {exc}.") from None
    if not isinstance(cfg, dict):
        raise TunerError(f"{path}: a config.json holds a JSON object, got {type(cfg).__name__}.")
    heads = _config_int(cfg, "num_attention_heads", path)
    hidden = _config_int(cfg, "hidden_size", path)
    kv_heads = _config_int(cfg, "num_key_value_heads", path, default=heads)
    if heads % kv_heads:
        raise TunerError(f"{path}: num_attention_heads ({heads}) must be a multiple of "
                         f"num_key_value_heads ({kv_heads}).")
    return ModelSpec(
        name=str(cfg.get("_name_or_path") or path.parent.name or path.stem),
        num_layers=_config_int(cfg, "num_hidden_layers", path),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=_config_int(cfg, "head_dim", path, default=max(hidden // heads, 1)),
        intermediate_size=_config_int(cfg, "intermediate_size", path),
        vocab_size=_config_int(cfg, "vocab_size", path),
        max_position=_config_int(cfg, "max_position_embeddings", path, default=4096),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        source=str(path),
    )


def get_model(name_or_path: str, models: dict[str, ModelSpec] | None = None) -> ModelSpec:
    """A catalog name (case-insensitive) or a path to a Hugging Face config.json / model dir."""
    models = load_models() if models is None else models
    for key, spec in models.items():
        if key.lower() == name_or_path.strip().lower():
            return spec
    p = Path(name_or_path)
    if p.exists():
        return model_from_hf_config(p)
    raise TunerError(
        f"Unknown model {name_or_path!r}.{close_matches_hint(name_or_path, models)} "
        "(`tuner models` lists them; or pass a path to a Hugging Face config.json.)"
    )


__all__ = [
    "GPU", "GIB", "ModelSpec", "apply_prices", "get_gpu", "get_model", "load_gpus", "load_models",
    "model_from_hf_config", "parse_price_overrides",
]
