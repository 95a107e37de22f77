"""Release boundaries corrected by reading the PyPI wheels themselves (stop 50): each pinned on
both sides, the last release without the change and the first with it.

- the V1 batch-default table (dicts for both figures): the 0.9.2 wheel's arg_utils.py, 0.9.1's
  has one max_num_seqs for every entry point;
- the >= 160 GiB tier: the 0.28.0 wheel's get_batch_defaults, not 0.27.1's;
- the request log opt-in: the 0.10.1 wheel's api_server.py (enable_log_requests), 0.10.0 logs;
- an FP8 KV cache sending V1 back to V0: until 0.11.0 (0.10.2's oracle still asks the
  platform); Hopper exempt from 0.8.2 (0.8.0 / 0.8.1 fall back everywhere), B200 from 0.10.0,
  MLA from 0.10.2;
- `vllm serve --config`: in the 0.6.0 wheel (vllm/scripts.py, vllm/utils.py), not 0.5.5's;
  its loader takes YAML booleans from 0.6.4 (0.6.3.post1 passes `--key True`);
- SGLang's overlap scheduler on by default: the 0.3.6 wheel's server_args.py
  (disable_overlap_schedule = False), opt-in in 0.3.5.post2.
"""

from __future__ import annotations

import pytest
import yaml

from tuner.core.catalog import get_model, load_gpus
from tuner.core.config import ServingConfig
from tuner.core.engine_defaults import vllm_defaults
from tuner.exports.formats import render_export
from tuner.exports.vllm import fp8_kv_falls_back_to_v0
from tuner.predictors.engine_overhead import logs_requests_by_default, sglang_profile_for

GPUS = load_gpus()
LLAMA = get_model("llama-3-8b")
V0 = ServingConfig(gpu="H100", scheduler="vllm-v0", chunk_size=8192, max_running=256)
V1 = ServingConfig(gpu="H100", chunk_size=8192, max_running=256)


def _yaml(config, version, gpu=None, **kw):
    return render_export("vllm", config, LLAMA, GPUS[gpu or config.gpu], max_model_len=4096,
                         engine_version=version, **kw)


@pytest.mark.parametrize("version,closest", [("0.9.1", True), ("0.9.2", False)])
def test_the_batch_table_is_stated_from_0_9_2(version, closest):
    d = vllm_defaults("H100", 80, "run-batch", version)
    assert (d.max_num_batched_tokens, d.max_num_seqs) == (2048, 128)
    assert ("closest known" in d.source) == closest
    assert ("0.9.2's table" in d.describe()) == closest


@pytest.mark.parametrize("version,tokens", [("0.27.1", 8192), ("0.28.0", 16384)])
def test_the_160_gib_tier_from_0_28_0(version, tokens):
    b200 = GPUS["B200"]
    d = vllm_defaults(b200.name, b200.memory_gib, "serve", version)
    assert (d.max_num_batched_tokens, d.max_num_seqs) == (tokens, 1024)


@pytest.mark.parametrize("version,logs", [("0.10.0", True), ("0.10.1", False)])
def test_the_request_log_is_opt_in_from_0_10_1(version, logs):
    assert logs_requests_by_default(version, "serve") == logs
    text = _yaml(V1, version, disable_log_requests=True)
    assert (yaml.safe_load(text).get("disable-log-requests") is True) == logs


@pytest.mark.parametrize("gpu,version,falls_back", [
    ("A100-80G", "0.10.2", True), ("A100-80G", "0.11.0", False),  # V0 gone in 0.11
    ("H100", "0.8.1", True), ("H100", "0.8.2", False),  # FA3's FP8 from 0.8.2
    ("MI300X", "0.8.1", True), ("MI300X", "0.8.2", False),  # ROCm from 0.8.2
    ("B200", "0.9.2", True), ("B200", "0.10.0", False),  # capability 10.0 from 0.10.0
    ("B300", "0.10.2", True),  # 10.3: not is_device_capability(100)
    ("A100-80G", "0.7.3", False),  # V0 already
])
def test_fp8_kv_v0_fallback_follows_the_wheels(gpu, version, falls_back):
    assert fp8_kv_falls_back_to_v0(version, GPUS[gpu], LLAMA) == falls_back
    if gpu != "MI300X":
        config = ServingConfig(gpu=gpu, kv_bits=8, chunk_size=8192, max_running=256)
        assert ("falls back to the V0 engine" in _yaml(config, version)) == falls_back


@pytest.mark.parametrize("version,falls_back", [("0.10.1", True), ("0.10.2", False)])
def test_fp8_kv_mla_stays_on_v1_from_0_10_2(version, falls_back):
    assert fp8_kv_falls_back_to_v0(version, GPUS["A100-80G"], get_model("deepseek-v3")) == (
        falls_back)


@pytest.mark.parametrize("version,has_config", [("0.5.5", False), ("0.6.0", True)])
def test_serve_config_from_0_6_0(version, has_config):
    text = _yaml(V0, version)
    assert (f"vllm serve {LLAMA.load_id} --config THIS_FILE" in text) == has_config
    assert ("has no --config" in text) == (not has_config)


def _loader_before_0_6_4(text: str) -> list[str]:
    """The argv the 0.6.0 - 0.6.3.post1 wheels' _load_config_file makes: `--key str(value)`."""
    argv: list[str] = []
    for key, value in (yaml.safe_load(text) or {}).items():
        argv += ["--" + key, str(value)]
    return argv


@pytest.mark.parametrize("version,in_file", [("0.6.3", False), ("0.6.3.post1", False),
                                             ("0.6.4", True)])
def test_store_true_flags_leave_the_yaml_before_0_6_4(version, in_file):
    text = _yaml(V0, version, num_scheduler_steps=10, disable_log_requests=True)
    assert (yaml.safe_load(text).get("disable-log-requests") is True) == in_file
    assert ("--config THIS_FILE --disable-log-requests" in text) == (not in_file)
    if not in_file:  # no store_true flag reaches the parser with a True / False after it
        argv = _loader_before_0_6_4(text)
        values = [argv[i + 1] for i in range(0, len(argv), 2)
                  if argv[i] != "--enable-chunked-prefill"]
        assert not {"True", "False"} & set(values)


@pytest.mark.parametrize("version,overlap", [("0.3.5.post2", False), ("0.3.6", True),
                                             ("0.3.6.post3", True)])
def test_sglang_overlap_on_by_default_from_0_3_6(version, overlap):
    assert sglang_profile_for(version).overlapped == overlap
