"""A Llama-shaped checkpoint with random weights, created locally (no download).

Tests and the CPU validation loop need a model a real engine (vLLM, transformers) can load; no
model may be fetched from a hub, so one is written here: the shapes of a catalog entry (by
default ``tiny-llama``), random weights from a fixed seed, and a WordLevel tokenizer whose
vocabulary is ``<unk> <s> </s> <pad> w4 w5 ...`` up to the model's vocab size.

    python -m runners.tiny_model --out /tmp/tiny-llama                 # tiny-llama's shape
    python -m runners.tiny_model --out /tmp/m --shape '{"num_layers": 4, ...}'

Large shapes (an 8B-shaped model on a GPU machine) are written without weights
(``weights=False``): config + tokenizer only, and the engine is told ``load_format="dummy"``,
which initialises random weights in place instead of reading gigabytes from disk.

Needs ``torch`` and ``transformers`` only when weights are written (imported lazily); the
tokenizer needs ``tokenizers``. The module itself imports nothing heavy, so ``tuner`` can import
it for :func:`shape_of` / :func:`default_cache_dir`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
SHAPE_KEYS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
              "intermediate_size", "vocab_size", "max_position", "tie_embeddings")
# Above this many parameters the weights are not written (load_format="dummy" instead).
MAX_WRITTEN_PARAMS = 200_000_000
MARKER = "tuner-random-model.json"


def shape_of(spec: Any) -> dict:
    """The shape fields of a tuner ModelSpec (or any object / dict with those names)."""
    get = spec.get if isinstance(spec, dict) else lambda k, d=None: getattr(spec, k, d)
    out = {k: get(k) for k in SHAPE_KEYS}
    missing = [k for k, v in out.items() if v is None]
    if missing:
        raise ValueError(f"model shape is missing {', '.join(missing)}")
    out["tie_embeddings"] = bool(out["tie_embeddings"])
    for k in SHAPE_KEYS[:-1]:
        out[k] = int(out[k])
    return out


def num_params(shape: dict) -> int:
    h, L = shape["hidden_size"], shape["num_layers"]
    d = shape["head_dim"]
    per_layer = (h * shape["num_heads"] * d + 2 * h * shape["num_kv_heads"] * d
                 + shape["num_heads"] * d * h + 3 * h * shape["intermediate_size"] + 2 * h)
    emb = shape["vocab_size"] * h
    return L * per_layer + emb + (0 if shape["tie_embeddings"] else emb) + h


def shape_hash(shape: dict, seed: int, weights: bool) -> str:
    text = json.dumps({"shape": shape, "seed": seed, "weights": weights, "v": FORMAT_VERSION},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    base = os.environ.get("TUNER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tuner")
    return Path(base) / "models"


def hf_config(shape: dict, dtype: str = "bfloat16") -> dict:
    """A Hugging Face LlamaConfig dict for the shape (what config.json holds)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": shape["vocab_size"],
        "hidden_size": shape["hidden_size"],
        "intermediate_size": shape["intermediate_size"],
        "num_hidden_layers": shape["num_layers"],
        "num_attention_heads": shape["num_heads"],
        "num_key_value_heads": shape["num_kv_heads"],
        "head_dim": shape["head_dim"],
        "max_position_embeddings": shape["max_position"],
        "tie_word_embeddings": shape["tie_embeddings"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "initializer_range": 0.02,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": dtype,
        "dtype": dtype,
    }


def _write_tokenizer(out: Path, vocab_size: int) -> None:
    """A WordLevel tokenizer: special tokens, then one 'word' per remaining id."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import WordLevel

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for i in range(len(SPECIAL_TOKENS), vocab_size):
        vocab[f"w{i}"] = i
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "model_max_length": 1 << 30, "clean_up_tokenization_spaces": False,
    }, indent=2))
    (out / "special_tokens_map.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
    }, indent=2))


def _write_weights(out: Path, cfg: dict, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**{k: v for k, v in cfg.items()
                            if k not in ("architectures", "torch_dtype", "dtype")})
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    # save_pretrained rewrites config.json; keep our full, engine-neutral version.
    (out / "config.json").write_text(json.dumps(cfg, indent=2))


def create_random_model(spec: Any, out_dir: str | Path | None = None, *, seed: int = 0,
                        weights: bool | None = None) -> Path:
    """Write (once) a random-weight Llama-shaped checkpoint for ``spec`` and return its folder.

    ``spec``: a tuner ModelSpec or a dict of the shape fields. ``out_dir``: the folder (default:
    a cache folder keyed by the shape). ``weights``: write weights (default: when the model has
    at most MAX_WRITTEN_PARAMS parameters); without, load it with ``load_format="dummy"``.
    Idempotent: an existing complete folder of the same shape is reused.
    """
    shape = shape_of(spec)
    if weights is None:
        weights = num_params(shape) <= MAX_WRITTEN_PARAMS
    key = shape_hash(shape, seed, weights)
    name = getattr(spec, "name", None) or (spec.get("name") if isinstance(spec, dict) else None)
    out = Path(out_dir) if out_dir else default_cache_dir() / f"{name or 'llama'}-{key}"
    marker = out / MARKER
    if marker.is_file():
        try:
            if json.loads(marker.read_text()).get("key") == key:
                return out
        except (OSError, json.JSONDecodeError):
            pass
    out.mkdir(parents=True, exist_ok=True)
    cfg = hf_config(shape)
    if weights:
        _write_weights(out, cfg, seed)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}, indent=2))
    _write_tokenizer(out, shape["vocab_size"])
    marker.write_text(json.dumps({"key": key, "shape": shape, "seed": seed, "weights": weights,
                                  "name": name}, indent=2))
    return out


def is_random_model(path: str | Path) -> dict | None:
    """The marker of a folder written by :func:`create_random_model`, else None."""
    marker = Path(path) / MARKER
    try:
        return json.loads(marker.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write the checkpoint into")
    ap.add_argument("--shape", help="JSON of the shape fields (default: tiny-llama's shape)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-weights", action="store_true",
                    help="config + tokenizer only (load with load_format=dummy)")
    a = ap.parse_args(argv)
    if a.shape:
        shape = json.loads(a.shape)
    else:
        shape = dict(TINY_LLAMA)
    path = create_random_model({"name": "tiny-llama", **shape}, a.out, seed=a.seed,
                               weights=False if a.no_weights else None)
    print(path)
    return 0


# tiny-llama's shape as in tuner/data/models.yaml (kept here so the module runs without tuner;
# tests check the two agree).
TINY_LLAMA = {"num_layers": 2, "hidden_size": 128, "num_heads": 4, "num_kv_heads": 2,
              "head_dim": 32, "intermediate_size": 344, "vocab_size": 1024,
              "max_position": 4096, "tie_embeddings": False}


if __name__ == "__main__":
    sys.exit(main())
