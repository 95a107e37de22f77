"""SGLang export: ``python -m sglang.launch_server`` arguments and command.

SGLang's documented server arguments (``--model-path``, ``--tp-size``, ``--chunked-prefill-size``,
``--max-running-requests``, ``--kv-cache-dtype``, ``--mem-fraction-static``,
``--schedule-policy``, ``--cpu-offload-gb``...), generated from ServingConfig's field metadata
(:mod:`tuner.core.config`). Every option and value written was checked against SGLang's own
parser (python/sglang/srt/server_args.py at sgl-project/sglang commit 001067ff, 2026, and again
the newest released wheel's, sglang 0.5.23, its argparse built by ServerArgs.add_cli_args): all
exist with the types written (``--cpu-offload-gb`` an int, ``--schedule-conservativeness`` a
float, ``--kv-cache-dtype`` fp8_e4m3 / fp4_mx_block16 among its choices), and the lpm schedule
policy turns to fcfs while more than 128 requests wait (schedule_policy.py
``WAITING_QUEUE_PREFIX_MATCH_MAX``). DP attention is written ``--attn-dp-size N``, an option
since sglang 0.5.22 (arg_groups/fields/parallel.py; 0.5.21 and older derive attn_dp_size from
``--dp-size N --enable-dp-attention`` and have no such option); 0.5.22 and 0.5.23 deprecate the
old pair (``--enable-dp-attention`` a DeprecatedStoreTrueAction that warns, turned into
``--attn-dp-size N`` and ``dp_size`` 1 by ``handle_deprecated_dp_attention`` in
arg_groups/parallel_hook.py; "remove the flag and the field after 2026-12-31"). tuner models one
SGLang release, the newest (tuner.core.sglang), so it writes the new option, with a note giving
the old pair for older releases; the importer reads both spellings.
:data:`SGLANG_KNOWN_OPTIONS` lists what was checked.

Expert parallelism (mixture-of-experts models): ``--ep-size`` is SGLang's expert-parallel
group, which lives inside one server's tensor-parallel group (SGLang's ``--dp-size`` alone runs
independent replicas, each with every expert). vLLM's data parallel + expert parallel (attention
per replica, experts split over all tp x dp GPUs) is SGLang's DP attention:
``--tp-size tp*dp --attn-dp-size dp --ep-size tp*dp`` (no ``--dp-size``: SGLang refuses
replicas beside attention DP; docs.sglang.io, "Expert Parallelism" and "Server Arguments":
``--ep-size``, ``--attn-dp-size``); without expert
parallelism the same less ``--ep-size`` (the experts tensor-split over the tp*dp GPUs, as vLLM's
data-parallel engine does and as tuner sizes and prices any MoE plan at dp > 1).
"""

from __future__ import annotations

import math
from typing import Any

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import SGLANG_SCHEDULE_POLICY, ServingConfig, check_model_config
from tuner.core.sglang import (
    DEFAULT_CONSERVATIVENESS,
    MAMBA_FULL_MEMORY_RATIO,
    MAMBA_SLOTS_PER_REQUEST,
    plan_memory_sglang,
)
from tuner.core.units import plural
from tuner.exports import common

_SGLANG_ORDERING = {v: k for k, v in SGLANG_SCHEDULE_POLICY.items()}
#: The options this module writes, each checked against SGLang's parser (see module docstring);
#: tests keep the writer within it, so a new option is checked before it ships.
SGLANG_KNOWN_OPTIONS = frozenset({
    "model-path", "tp-size", "pp-size", "dp-size", "chunked-prefill-size", "max-prefill-tokens",
    "enable-mixed-chunk", "max-running-requests", "mem-fraction-static", "page-size",
    "context-length", "kv-cache-dtype", "quantization", "cpu-offload-gb", "schedule-policy",
    "ep-size", "attn-dp-size", "schedule-conservativeness",
})
#: the first SGLang release with --attn-dp-size (older: --dp-size N --enable-dp-attention)
ATTN_DP_SIZE_SINCE = "0.5.22"
#: what SGLang's DP attention does to the server's arguments (0.5.23 arg_groups/parallel_hook.py
#: handle_data_parallelism: chunked_prefill_size //= attn_dp_size, schedule_conservativeness
#: *= 0.3; model_executor/pool_configurator.py: max_running_requests // attn_dp_size per rank;
#: the same with dp_size for the old spelling): the export gives the whole server's figures so
#: each rank runs the plan's
DP_ATTENTION_CONSERVATIVENESS = 0.3
_SGLANG_ALIASES = {"tp": "tp-size", "tensor-parallel-size": "tp-size",
                   "pp": "pp-size", "pipeline-parallel-size": "pp-size",
                   "dp": "dp-size", "data-parallel-size": "dp-size", "model": "model-path",
                   "attention-data-parallel-size": "attn-dp-size"}
# The order the command lists the options in.
_OPTION_ORDER = ("model-path", "tp-size", "pp-size", "dp-size", "attn-dp-size", "ep-size",
                 "chunked-prefill-size", "max-prefill-tokens",
                 "enable-mixed-chunk", "max-running-requests", "mem-fraction-static", "page-size",
                 "context-length", "kv-cache-dtype", "quantization", "cpu-offload-gb",
                 "schedule-policy", "schedule-conservativeness")


# ---- notes: what SGLang cannot be told, in the order the command lists them -------------------
def _eviction_note(dep: common.Deployment) -> str:
    cap, _ = dep.kv_capacity()
    fits = cap // dep.max_model_len
    return (f"scheduler {dep.config.scheduler!r} is eviction-free: SGLang retracts requests when "
            f"the KV pool is full; set --max-running-requests <= {max(fits, 1)} (~{cap} KV "
            f"tokens / context length {dep.max_model_len}) or raise --schedule-conservativeness "
            "so the batch always fits.")


_NOTES: dict[str, common.NoteText] = {
    "model_id": lambda dep: common.model_id_note(dep, "model-path"),
    "prefill_budget": (
        "scheduler {c.scheduler!r}: the predicted prefill budget is {c.chunk_size} tokens but "
        "SGLang raises max-prefill-tokens to the context length ({mml}); expect larger prefill "
        "batches than predicted."),
    "kv_bits_4": (
        "kv_bits=4: SGLang's 4-bit KV cache (kv-cache-dtype fp4_mx_block16; fp4_e2m1 in "
        "older releases, rejected by newer ones) needs a recent GPU, CUDA and attention "
        "backend; otherwise use --kv-cache-dtype fp8_e4m3 (half the predicted KV capacity)."),
    "weight_bits_8": (
        "weight_bits=8: {gpu.name} has no FP8 tensor cores: SGLang runs --quantization fp8 "
        "there as weight-only FP8 through Marlin (W8A16, turned on for sm_80 - sm_88: 8-bit "
        "weight bytes at the 16-bit compute rate, as predicted); an INT8 checkpoint (e.g. "
        "--quantization w8a8_int8 with a compressed-tensors W8A8 model) given with "
        "--quantized-model serves as well. Output quality is not simulated."),
    "weight_bits_4": (
        "weight_bits=4: serve a 4-bit AWQ/GPTQ checkpoint as --model-path; SGLang "
        "reads the method from its config (awq_marlin/gptq_marlin kernels)."),
    "kv_offload": (
        "kv_offload_layers={c.kv_offload_layers}: SGLang has no layer-wise KV offload; its "
        "hierarchical cache (--enable-hierarchical-cache) keeps evicted prefixes in host memory "
        "but does not extend the running batch's KV. Expect a different makespan."),
    "attention_on_cpu": (
        "attention_on_cpu: SGLang has no CPU decode attention for offloaded KV layers; keep "
        "the KV on the GPU (lower --max-running-requests if it does not fit). Expect a "
        "different makespan."),
    "cpu_threads": lambda dep: common.cpu_threads_note(dep, "SGLang has no server argument"),
    "cpu_threads_unused": common.cpu_threads_unused_note,
    "ordering_no_policy": (
        "ordering {c.ordering!r}: SGLang has no such schedule policy; sort the "
        "input in that order ({howto}) and submit it in order (schedule-policy fcfs)."),
    "ordering_blend": (
        "ordering 'blend': schedule-policy lpm (longest prefix match) groups "
        "requests that share a prefix, but SGLang falls back to fcfs while more than 128 requests "
        "wait; also submit the input sorted so that requests sharing a prefix are adjacent."),
    "ordering_submit": (
        "ordering {c.ordering!r}: the prediction submits the requests in that order ({howto}); "
        "sort the input so and submit it in order (SGLang queues them as they arrive, "
        "schedule-policy {c.schedule_policy})."),
    "eviction_free": _eviction_note,
    "moe_replicas": lambda dep: (
        f"dp={dep.config.dp} of a mixture-of-experts model as vLLM {dep.engine_version} (V0) "
        f"runs it and the prediction sizes it: {dep.config.dp} independent servers (--dp-size "
        f"{dep.config.dp}, no DP attention), each holding every expert on its "
        f"{plural(dep.config.tp, 'GPU')}."),
    "moe_dp": (
        "dp={c.dp} of a mixture-of-experts model: one server with DP attention "
        "(--attn-dp-size {c.dp}, --tp-size {c.num_gpus} = tp x dp), attention per replica and "
        "the experts split over all {c.num_gpus} GPUs, as the prediction sizes and prices it "
        "(plain --dp-size would run {c.dp} servers that each hold every expert); SGLang runs "
        "DP attention for the DeepSeek, Qwen MoE and other MoE families it lists: check yours "
        "is among them. SGLang before " + ATTN_DP_SIZE_SINCE + " has no --attn-dp-size: "
        "there write --dp-size {c.dp} --enable-dp-attention in its place (the same server)."),
}


def sglang_server_args(config: ServingConfig, model: ModelSpec, gpu: GPU, *, max_model_len: int,
                       kv_capacity_tokens: int | None = None,
                       quantized_model: str | None = None, engine_version: str | None = None,
                       ) -> tuple[list[tuple[str, Any]], list[str]]:
    """SGLang ``launch_server`` options [(dashed name, value)] (True: a bare flag) and notes for
    what SGLang lacks, following SGLang's documented server arguments. ``engine_version``: the
    vLLM release a vLLM plan was searched for (a V0 release's mixture-of-experts replicas are
    independent servers, --dp-size, not DP attention)."""
    check_model_config(config, model)
    dep = common.Deployment(config, model, gpu, max_model_len, kv_capacity_tokens,
                            quantized_model, engine_version=engine_version)
    opts = common.mapped_args(config, "sglang")
    # SGLang refuses a request whose prompt + max_new_tokens reaches the context length
    # (TokenizerManager._validate_one_request: `>= self.context_len`), where vLLM allows
    # max_model_len itself: one token more serves the longest request
    opts |= {"model-path": dep.checkpoint,
             "context-length": min(max_model_len + 1, max(model.max_position, max_model_len))}
    if config.expert_parallel:  # see the module docstring
        opts["ep-size"] = config.tp * config.dp
    if dep.one_engine:  # experts over all tp x dp GPUs, attention per replica: DP attention
        opts["tp-size"] = config.tp * config.dp
        opts.pop("dp-size", None)  # attention DP is no replica count (SGLang refuses both > 1)
        opts["attn-dp-size"] = config.dp
    # P = C: the prefill chunk and the step's prefill budget are the token budget; prefill-first
    # turns chunking off (-1) and keeps the budget where SGLang allows it (>= context length).
    if not config.chunked_prefill:
        opts["chunked-prefill-size"] = -1
    if config.chunked_prefill or config.chunk_size >= max_model_len:
        opts["max-prefill-tokens"] = config.chunk_size
    if dep.one_engine:  # DP attention divides these by its size (DP_ATTENTION_CONSERVATIVENESS)
        if opts.get("chunked-prefill-size", 0) > 0:
            opts["chunked-prefill-size"] *= config.dp
        opts["max-running-requests"] = config.max_running * config.dp
        opts["schedule-conservativeness"] = round(
            DEFAULT_CONSERVATIVENESS / DP_ATTENTION_CONSERVATIVENESS, 4)
    if "cpu-offload-gb" in opts:  # per GPU, an int in SGLang's parser
        opts["cpu-offload-gb"] = max(1, math.ceil(dep.offload_gib_per_gpu - 1e-9))
    if config.engine == "sglang":
        # simulated as SGLang runs it: its own policy, no mixed chunks (SGLang's default)
        opts["schedule-policy"] = config.schedule_policy
        opts.pop("enable-mixed-chunk", None)
        # simulated at the page SGLang's default attention backend picks on this GPU
        # (tuner.core.sglang.sglang_page_size): no --page-size, which would only restate it
        # (block_size is held at 1 for SGLang plans: 1 is not what a B200 runs)
        opts.pop("page-size", None)
    else:  # a vLLM plan: the policy nearest its order; other orderings: sort the input (a note)
        opts["schedule-policy"] = SGLANG_SCHEDULE_POLICY.get(config.ordering, "fcfs")
    notes = dep.quantized_checkpoint_notes(opts, common.notes_for(dep, _NOTES), "model-path",
                                           "SGLang")
    if config.engine == "sglang" and getattr(model, "is_hybrid", False):
        notes.append(_hybrid_note(config, model, gpu))
        # the state slots cap the running requests (resolve_max_num_reqs), as the simulator
        # takes them: the flag at that cap, not at a value SGLang lowers with a warning
        cap = plan_memory_sglang(model, gpu, config).max_running_by_slots
        given = opts.get("max-running-requests")
        if cap and isinstance(given, int) and config.max_running > cap:
            opts["max-running-requests"] = given // config.max_running * cap
    return list(common.in_order(opts, _OPTION_ORDER).items()), notes


def vllm_plan_notes(config: ServingConfig, notes: list[str]) -> list[str]:
    """`notes` of an SGLang file, headed, for a vLLM plan translated into SGLang's words, by
    the line saying its header's predicted figures are vLLM's (SGLang's own were not
    simulated for it)."""
    if config.engine == "sglang":
        return notes
    return ["this plan was simulated for vLLM (vLLM's scheduler, memory plan and host costs): "
            "the predicted makespan and $ above are vLLM's, not SGLang's; these are the same "
            "knobs in SGLang's words, not simulated under SGLang (search with --engines sglang "
            "for SGLang's own plans).", *notes]


def _hybrid_note(config: ServingConfig, model: ModelSpec, gpu: GPU) -> str:
    """What the plan took of SGLang's Mamba state pool (tuner.core.sglang._hybrid_state_pool),
    which SGLang sizes itself from the flags above: no flag restates it."""
    plan = plan_memory_sglang(model, gpu, config)
    # a DP-attention server (tuner.core.sglang.dp_attention_supported): one pool per DP rank,
    # each sized from its own GPU's memory and capping that rank's running requests
    per = ("per DP-attention rank (SGLang sizes one pool per rank)"
           if getattr(model, "is_moe", False) and config.dp > 1 else "per replica")
    return (f"{model.name} is a hybrid ({model.linear_mixer_label}) model: the prediction "
            f"takes SGLang's Mamba state pool as its defaults size it (--mamba-full-memory-ratio "
            f"{MAMBA_FULL_MEMORY_RATIO:g} of the memory after the weights: {plan.state_slots:,} "
            f"request states, the radix cache on: at most {plan.max_running_by_slots:,} running "
            f"requests {per}, {MAMBA_SLOTS_PER_REQUEST} states each) and no prefix hits; "
            "--disable-radix-cache, --max-mamba-cache-size or --mamba-full-memory-ratio would "
            "run another split than the one predicted.")


#: Marks a launch command that is one machine's server of a plan over several machines: its
#: --dp-size counts that machine's replicas; the plan's DP is the ``# tuner-config:`` line's.
PER_MACHINE_MARK = "# ONE machine's server"


def machine_shares(dep: common.Deployment) -> list[list[int]] | None:
    """The replicas of each machine when the plan's replicas, each inside one machine, spread
    over several machines (SGLang's --dp-size runs replicas inside one server, on one
    machine); None when one server (or one multi-node group per replica) runs the plan."""
    m = dep.machines
    if m.count <= 1 or m.machines_per_replica > 1 or dep.one_engine:
        return None
    return dep.replicas_by_machine


def to_sglang_command(config: ServingConfig, model: ModelSpec, gpu: GPU, *, max_model_len: int,
                      header: str = "", kv_capacity_tokens: int | None = None,
                      quantized_model: str | None = None,
                      engine_version: str | None = None) -> str:
    """``python -m sglang.launch_server`` with every server argument, notes on top; for a plan
    over several machines, one machine's server (its replicas as --dp-size)."""
    opts, notes = sglang_server_args(config, model, gpu, max_model_len=max_model_len,
                                     kv_capacity_tokens=kv_capacity_tokens,
                                     quantized_model=quantized_model,
                                     engine_version=engine_version)
    dep = common.Deployment(config, model, gpu, max_model_len, engine_version=engine_version)
    title = [f"# SGLang server launch written by tuner for {config.gpu} x{config.num_gpus}.",
             dep.machines_line("sglang")]
    shares = machine_shares(dep)
    if shares is not None:
        per, last = len(shares[0]), len(shares[-1])
        opts = [(k, per) if k == "dp-size" else (k, v) for k, v in opts if per > 1 or k != "dp-size"]
        title.append(
            f"{PER_MACHINE_MARK} ({per} replica{'s' if per > 1 else ''} of TP {config.tp}): "
            f"run this command on each of the {len(shares)} machines"
            + (f" (on the last one with --dp-size {last})" if last != per else "")
            + f", each serving its 1/{len(shares)} share of the requests split by tokens as "
            "the prediction splits them (the .sglang-offline.py export splits the job so: "
            "MACHINE=K).")
    title += ["# Then submit the batch JSONL through its OpenAI-compatible API (port 30000), e.g.",
              "# the Batch API (/v1/files, /v1/batches) or an OpenAI client over the file's "
              "bodies."]
    return common.write_command(
        common.export_head(title, header, vllm_plan_notes(config, notes), config),
        "python -m sglang.launch_server", opts)


def _infer_without_comment(opts: dict[str, Any], chunk: Any, base: dict) -> None:
    """Fields the options imply when there is no ``# tuner-config:`` line."""
    if isinstance(chunk, int) and chunk < 0:
        base["scheduler"] = "vllm-v0"
        if isinstance(opts.get("max-prefill-tokens"), int):
            base["chunk_size"] = opts["max-prefill-tokens"]
    kv = str(opts.get("kv-cache-dtype") or "auto").lower()
    if kv.startswith("fp8"):
        base["kv_bits"] = 8
    elif kv.startswith("fp4"):
        base["kv_bits"] = 4
    bits = common.weight_bits_from_quantization(opts.get("quantization"))
    if bits is not None:
        base["weight_bits"] = bits
    policy = str(opts.get("schedule-policy") or "fcfs")
    if policy in _SGLANG_ORDERING:
        base["ordering"] = _SGLANG_ORDERING[policy]


def from_sglang_command(text: str, *, gpu: str | None = None) -> ServingConfig:
    """Parse a command written by :func:`to_sglang_command` back into a ServingConfig. Options
    that map 1:1 (tp, dp, max-running-requests, mem-fraction-static, page-size, a chunked-prefill
    size) override the ``# tuner-config:`` line; without the line the rest is inferred."""
    what = "SGLang launch command"
    raw = common.read_command(text, "sglang.launch_server", what)
    opts = {_SGLANG_ALIASES.get(k, k): v for k, v in raw.items()}
    if PER_MACHINE_MARK in text and common.tuner_config_line(text).get("dp"):
        opts.pop("dp-size", None)  # one machine's replicas: the plan's DP is the line's
    base, had_line = common.parsed_fields(text, opts, "sglang")
    chunk = opts.get("chunked-prefill-size")
    dp = opts.get("dp-size")
    attn_dp = opts.get("attn-dp-size")
    if isinstance(attn_dp, int) and attn_dp > 1:
        # --attn-dp-size N (SGLang >= 0.5.22) is the plan's DP, as --dp-size N
        # --enable-dp-attention (older releases) is: both spellings read back alike
        dp = base["dp"] = attn_dp
        dp_attention = True
    else:
        dp_attention = bool(opts.get("enable-dp-attention")) and isinstance(dp, int) and dp > 1
    if isinstance(chunk, int) and chunk > 0:
        base["chunk_size"] = chunk // dp if dp_attention else chunk  # per rank
    if dp_attention and isinstance(opts.get("max-running-requests"), int):
        base["max_running"] = opts["max-running-requests"] // dp
    if dp_attention and isinstance(opts.get("tp-size"), int):
        base["tp"] = opts["tp-size"] // dp  # DP attention: --tp-size counts every GPU
    ep = opts.get("ep-size")
    if isinstance(ep, int):
        # on one GPU --ep-size is 1 with expert parallelism on or off (the same plan): there
        # the tuner-config line keeps what the search chose
        if ep > 1 or not had_line or base.get("tp", 1) * base.get("dp", 1) > 1:
            base["expert_parallel"] = ep > 1
    if not had_line:
        _infer_without_comment(opts, chunk, base)
    return common.finish_config(base, gpu, what)


def render_command(dep: common.Deployment, opts: common.RenderOptions) -> str:
    """The export registry's entry (tuner.exports.formats)."""
    return to_sglang_command(dep.config, dep.model, dep.gpu, max_model_len=dep.max_model_len,
                             header=opts.header, kv_capacity_tokens=dep.kv_capacity_tokens,
                             quantized_model=dep.quantized_model,
                             engine_version=dep.engine_version)
