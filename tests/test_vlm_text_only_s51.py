"""s51: a text-only job on a VLM checkpoint leaves vLLM's vision tower out where it can.

tuner's workloads are text-only. vLLM builds a VLM's vision tower only when
--limit-mm-per-prompt leaves one of its modalities above 0: Qwen2.5-VL, Mistral-3 and Llama-4
from 0.11 (the 0.14.0 wheel's qwen2_5_vl.py: `if get_limit_per_prompt("image") or
get_limit_per_prompt("video")`), every model from 0.15 through `_mark_tower_model`
(interfaces.py), Gemma-3 only from 0.15 (0.14.0's gemma3_mm.py builds SiglipVisionModel
unconditionally). The memory plan counted the tower on every release (gemma-3-27b, one H100,
the newest vLLM: 38,864 KV tokens; 40,496 without the tower's 0.77 GiB) and the exports let
vLLM build it. Now the vLLM exports zero the tower's limits where the release then skips it,
and the plan leaves it out there; SGLang (0.5.23 builds it always) and older releases count it.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
import yaml

from tests.test_vlm_weights_s51 import QWEN25_VL_7B
from tuner.core import sglang as sg
from tuner.core.catalog import (
    GIB,
    get_gpu,
    get_model,
    load_gpus,
    model_from_config_dict,
    model_from_hf_config,
)
from tuner.core.config import ServingConfig
from tuner.core.memory import plan_memory, vllm_text_only_limits
from tuner.exports.common import engine_python
from tuner.exports.formats import EXPORTERS, render_export

GPUS = load_gpus()
H100 = get_gpu("H100", GPUS)
CFG = ServingConfig(gpu="H100")
VLLM_FORMATS = [f for f, e in EXPORTERS.items() if e.engine_argv is not None]



def tower_gib(model, version, cfg=CFG) -> float:
    """The plan's weights on one GPU beyond the same model without a tower, GiB."""
    with_tower = plan_memory(model, H100, cfg, engine_version=version)
    without = plan_memory(replace(model, vision_params=0), H100, cfg, engine_version=version)
    return (with_tower.weight_bytes - without.weight_bytes) / GIB


def export(fmt, model, version, cfg=CFG) -> str:
    return render_export(fmt, cfg, model, H100, max_model_len=8192, engine_version=version)


def limit_args(fmt, text) -> list[str]:
    """The --limit-mm-per-prompt values of an export's engine argument lists."""
    return [argv[i + 1] for argv in EXPORTERS[fmt].engine_argv(text)
            for i, tok in enumerate(argv) if tok == "--limit-mm-per-prompt"]


@pytest.fixture(scope="module")
def qwen_vl(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen25vl") / "config.json"
    path.write_text(json.dumps(QWEN25_VL_7B))
    return model_from_hf_config(path)  # its architecture read back from the file


def test_gemma_3_counts_its_tower_through_0_14_and_not_from_0_15():
    g = get_model("gemma-3-27b")
    assert tower_gib(g, "0.14.0") == pytest.approx(0.77, abs=0.01)
    assert vllm_text_only_limits(g, "0.14.0") == {}
    for version in ("0.15.0", "0.19.0", None):
        assert tower_gib(g, version) == 0.0
        assert vllm_text_only_limits(g, version) == {"image": 0}
    # the newest vLLM on one H100: the tower's 0.77 GiB go back to the KV cache
    assert plan_memory(g, H100, CFG).kv_capacity_tokens > (
        plan_memory(g, H100, CFG, engine_version="0.14.0").kv_capacity_tokens + 1_500)
    # tp 2: each rank held half the tower, and holds none of it now
    tp2 = ServingConfig(gpu="H100", tp=2)
    assert tower_gib(g, "0.14.0", tp2) == pytest.approx(0.77 / 2, abs=0.01)
    assert tower_gib(g, None, tp2) == 0.0


def test_gemma_3_exports_zero_the_image_limit_only_where_the_release_skips_the_tower():
    g = get_model("gemma-3-27b")
    for fmt in VLLM_FORMATS:
        assert limit_args(fmt, export(fmt, g, "0.14.0")) == [], fmt
        for version in ("0.15.0", None):
            text = export(fmt, g, version)
            assert limit_args(fmt, text) == ['{"image": 0}'], (fmt, version)
            assert "vision tower" in text  # the note says why, and what images would cost
    yml = yaml.safe_load(export("vllm", g, None).split("\n", 1)[1])
    assert json.loads(yml["limit-mm-per-prompt"]) == {"image": 0}  # a JSON string: every
    # release's --config loader passes it on as str(value), which the option parses as JSON
    assert "--limit-mm-per-prompt '{\"image\": 0}'" in export("vllm-run-batch", g, None)


def test_qwen2_5_vl_skips_its_image_and_video_tower_from_0_11(qwen_vl):
    assert qwen_vl.vision_params > 0
    assert tower_gib(qwen_vl, "0.10.2") == pytest.approx(qwen_vl.vision_weight_bytes / GIB)
    assert vllm_text_only_limits(qwen_vl, "0.10.2") == {}
    for version in ("0.11.0", "0.14.0", None):
        assert tower_gib(qwen_vl, version) == 0.0
        assert vllm_text_only_limits(qwen_vl, version) == {"image": 0, "video": 0}
    assert limit_args("vllm", export("vllm", qwen_vl, "0.11.0")) == ['{"image": 0, "video": 0}']


def test_a_vlm_of_unknown_architecture_follows_the_0_15_rule():
    # built from a dict: no config.json to read the architecture back from
    m = model_from_config_dict(QWEN25_VL_7B, where="c", name="vl", source="nowhere")
    assert vllm_text_only_limits(m, "0.14.0") == {}
    assert tower_gib(m, "0.14.0") > 1.0
    assert vllm_text_only_limits(m, "0.15.0") == {"image": 0, "video": 0}
    assert tower_gib(m, "0.15.0") == 0.0


def test_a_text_model_has_no_limit_and_sglang_keeps_the_tower():
    llama = get_model("llama-3-8b")
    assert vllm_text_only_limits(llama, None) == {}
    for fmt in VLLM_FORMATS:
        assert "limit-mm-per-prompt" not in export(fmt, llama, None)
        assert "limit_mm_per_prompt" not in export(fmt, llama, None)
    # SGLang builds the tower whatever it is told (0.5.23): its plan still holds it
    g = get_model("gemma-3-27b")
    cfg = ServingConfig(gpu="H100", engine="sglang", gpu_memory_utilization=0.85)
    new = sg.plan_memory_sglang(g, H100, cfg)
    old = sg.plan_memory_sglang(replace(g, vision_params=0), H100, cfg)
    assert (new.weight_bytes - old.weight_bytes) / GIB == pytest.approx(0.77, abs=0.01)


VLLM_PYTHON = engine_python("vllm")
# vLLM's own parser and EngineArgs (the model swapped for a local stand-in folder, as
# tuner.exports.common's check does where the checkpoint is not cached), one import for all
_PARSED_LIMITS = """
import json, sys, tempfile
from vllm.engine.arg_utils import EngineArgs
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
out = []
for argv in json.loads(sys.stdin.read()):
    ns = EngineArgs.add_cli_args(FlexibleArgumentParser()).parse_args(argv)
    ns.model = ns.tokenizer = tempfile.mkdtemp()
    args = EngineArgs.from_cli_args(ns)
    out.append({k: getattr(v, "count", v) for k, v in args.limit_mm_per_prompt.items()})
print("LIMITS " + json.dumps(out))
"""


@pytest.mark.skipif(VLLM_PYTHON is None,
                    reason="needs vLLM (this Python, .venv-vllm or TUNER_VLLM_PYTHON)")
def test_the_installed_vllm_parses_the_zero_limits_of_every_export(qwen_vl):
    g = get_model("gemma-3-27b")
    argvs = [argv for fmt in VLLM_FORMATS for m in (g, qwen_vl)
             for argv in EXPORTERS[fmt].engine_argv(export(fmt, m, None))]
    r = subprocess.run([VLLM_PYTHON, "-c", _PARSED_LIMITS], input=json.dumps(argvs),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    limits = json.loads(r.stdout.split("LIMITS ", 1)[1])
    assert limits == [{"image": 0}, {"image": 0, "video": 0}] * len(VLLM_FORMATS)
