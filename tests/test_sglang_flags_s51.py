"""SGLang's DP-attention spelling and KV page (stop 51).

* ``--attn-dp-size`` is an option since sglang 0.5.22 (arg_groups/fields/parallel.py; 0.5.21
  derives attn_dp_size from ``--dp-size N --enable-dp-attention``); 0.5.22 / 0.5.23 deprecate the
  old pair (handle_deprecated_dp_attention: attn_dp_size = dp_size, dp_size = 1) and refuse
  ``--dp-size`` > 1 beside ``--attn-dp-size`` > 1. handle_data_parallelism divides the chunk by
  attn_dp_size and multiplies the conservativeness by 0.3; the pool configurator gives each rank
  max_running_requests // attn_dp_size.
* On compute capability 10.x SGLang pages its KV 64 tokens (tuner.core.sglang.sglang_page_size),
  while an SGLang plan's ServingConfig holds block_size 1: the simulate memory table and the
  report's memory table name the page.
"""

import re
from types import SimpleNamespace

from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.core.catalog import get_gpu, get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.sglang import plan_memory_sglang
from tuner.exports import parse_export
from tuner.exports import sglang as sgl_export
from tuner.exports.common import Deployment
from tuner.exports.sglang import (
    SGLANG_KNOWN_OPTIONS,
    from_sglang_command,
    sglang_server_args,
    to_sglang_command,
)
from tuner.exports.sglang_offline import engine_kwargs
from tuner.reports import views
from tuner.reports.context import ModelInfo
from tuner.search.records import TrialRecord

GPUS = load_gpus()
MOE = get_model("qwen3-30b-a3b")
LLAMA = get_model("llama-3-8b")
EXAMPLE = "examples/shared_system_prompt.jsonl"


def _bare(text: str) -> str:
    return re.sub(r"^#.*\n", "", text, flags=re.M)


def test_moe_dp_export_writes_attn_dp_size_with_per_rank_scaling():
    cfg = ServingConfig(gpu="H100", tp=2, dp=2, expert_parallel=True, engine="sglang",
                        chunk_size=4096, max_running=128)
    opts, notes = sglang_server_args(cfg, MOE, get_gpu("H100", GPUS), max_model_len=8192)
    opts = dict(opts)
    assert sgl_export.ATTN_DP_SIZE_SINCE == "0.5.22"
    # SGLang 0.5.22+: --tp-size counts every GPU, --attn-dp-size the ranks, no replicas
    assert (opts["tp-size"], opts["attn-dp-size"], opts["ep-size"]) == (4, 2, 4)
    assert "dp-size" not in opts and "enable-dp-attention" not in opts
    # the whole server's figures: SGLang divides chunk and max-running by attn_dp_size and
    # multiplies the conservativeness by 0.3, so each rank runs the plan's
    assert opts["chunked-prefill-size"] == 4096 * 2
    assert opts["max-running-requests"] == 128 * 2
    assert abs(opts["schedule-conservativeness"] * 0.3 - 1.0) < 1e-3
    assert set(opts) <= SGLANG_KNOWN_OPTIONS
    assert any("before 0.5.22" in n and "--dp-size 2 --enable-dp-attention" in n
               for n in notes)
    # the offline script's sgl.Engine gets the same field (ServerArgs.attn_dp_size)
    kw, _ = engine_kwargs(Deployment(cfg, MOE, get_gpu("H100", GPUS), 8192))
    assert kw["attn_dp_size"] == 2 and "dp_size" not in kw and "enable_dp_attention" not in kw


def test_both_spellings_import_to_the_same_plan():
    g = get_gpu("H100", GPUS)
    for cfg in (ServingConfig(gpu="H100", tp=2, dp=2, expert_parallel=True, engine="sglang"),
                ServingConfig(gpu="H100", tp=1, dp=4, chunk_size=2048, max_running=64),
                ServingConfig(gpu="H100", tp=2, dp=2)):
        text = to_sglang_command(cfg, MOE, g, max_model_len=8192)
        cmd = _bare(text)  # the notes name the old pair for older releases
        assert f"--attn-dp-size {cfg.dp}" in cmd and "--enable-dp-attention" not in cmd
        old = text.replace(f"--attn-dp-size {cfg.dp} ",
                           f"--dp-size {cfg.dp} --enable-dp-attention ")
        assert "--enable-dp-attention" in _bare(old) and "--attn-dp-size" not in _bare(old)
        assert parse_export("sglang", text) == parse_export("sglang", old) == cfg
        # without the tuner-config line the options alone give the same plan
        new_bare, old_bare = (from_sglang_command(_bare(t), gpu="H100") for t in (text, old))
        assert new_bare == old_bare
        assert (new_bare.tp, new_bare.dp, new_bare.chunk_size, new_bare.max_running) == (
            cfg.tp, cfg.dp, cfg.chunk_size, cfg.max_running)
    alias = ("python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp-size 4 "
             "--attention-data-parallel-size 2 --ep-size 4\n")
    got = from_sglang_command(alias, gpu="H100")
    assert (got.tp, got.dp, got.expert_parallel) == (2, 2, True)


def test_simulate_memory_table_names_sglangs_page():
    runner = CliRunner()
    for gpu, page in (("B200", 64), ("H100", 1)):
        r = runner.invoke(app, ["simulate", "-w", EXAMPLE, "-m", "llama-3-8b", "-g", gpu,
                                "--engine", "sglang"], env={"COLUMNS": "240"})
        assert r.exit_code == 0, r.output
        row = next(line for line in r.output.splitlines() if "KV capacity" in line)
        assert re.search(rf"[\d,]+ tokens \(page {page}\)", row), row


def test_report_memory_table_names_sglangs_page(monkeypatch):
    monkeypatch.setattr(views, "_winner_roles", lambda ctx: [(0, ["fastest"]), (1, ["cheapest"])])
    ctx = SimpleNamespace(model=ModelInfo(name=LLAMA.name, num_params=LLAMA.num_params,
                                          hf_id=LLAMA.hf_id))
    sgl = ServingConfig(gpu="B200", engine="sglang", gpu_memory_utilization=0.85)
    vllm = ServingConfig(gpu="B200")
    plan = plan_memory_sglang(LLAMA, get_gpu("B200", GPUS), sgl)
    assert plan.kv_capacity_tokens % 64 == 0
    trials = {n: TrialRecord(number=n, config=c, feasible=True, memory=plan)
              for n, c in ((0, sgl), (1, vllm))}
    rows = {r["number"]: r for r in views._formatted_memory_rows(ctx, trials)}
    assert rows[0]["kv_tokens_s"] == f"{plan.kv_capacity_tokens:,} (page 64)"
    assert "page" not in rows[1]["kv_tokens_s"]  # vLLM's block is its config's block_size
    # a model the catalog lacks: the page is the plan's (stop 52), no catalog look-up
    ctx.model = ModelInfo(name="my-own-model", num_params=1, hf_id=None)
    rows = views._formatted_memory_rows(ctx, trials)
    assert rows[0]["kv_tokens_s"] == f"{plan.kv_capacity_tokens:,} (page 64)"
