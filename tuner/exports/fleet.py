"""A fleet plan as files (issue #27 item 6): per part, its share of the input, its engine's
run-batch launcher and a SkyPilot task, so one job runs across the GPU types at once.

    files = fleet_files(plan, workload_lines, workload, model, gpus, max_model_len=...)
    # {"fleet.json": ..., "part-1-A10.jsonl": ..., "part-1-A10.run-batch.sh": ...,
    #  "part-1-A10.sky.yaml": ..., ...}

The shares are the ones the plan was simulated with (tuner.search.fleet.deal on the same
workload): every request is in exactly one part's JSONL, as the simulator split them. SkyPilot
(`sky launch -c NAME part-K.sky.yaml`) is the common way to launch one job's parts across
clouds; each task runs its part's launcher on each of its machines (MACHINE=$SKYPILOT_NODE_RANK)
and leaves its results in the part's output JSONL. The launchers are resumable
(tuner.exports.run_batch): an interrupted part, rerun, sends only its unanswered requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.core.workload import Workload
from tuner.exports.formats import render_export
from tuner.search.fleet import deal


def part_name(index: int, config: ServingConfig) -> str:
    """'part-1-A10': the files of a plan's part (1-based, in the plan's order)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in config.gpu)
    return f"part-{index + 1}-{safe}"


def split_lines(lines: list[str], workload: Workload, shares: list[float]) -> list[list[str]]:
    """The workload file's request lines per part, dealt as the plan was simulated; one
    TunerError when the file's lines are not the workload's requests one for one (a file read
    with --skip-invalid, or changed since)."""
    lines = [ln for ln in lines if ln.strip()]
    if len(lines) != len(workload):
        raise TunerError(f"The workload file has {len(lines)} request lines, the plan's workload "
                         f"{len(workload)} requests: a fleet's parts are cut from the file line "
                         "by line; fix or drop its invalid lines and search again.")
    return [[lines[i] if lines[i].endswith("\n") else lines[i] + "\n" for i in idx]
            for idx in deal(workload, np.asarray(shares, dtype=np.float64))]


def sky_task(name: str, config: ServingConfig, gpu: GPU, machines: dict, launcher: str,
             output: str) -> str:
    """A SkyPilot task YAML for one part: its machines (num_nodes), each with the GPUs it
    uses (accelerators GPU:N, the provider's instance type where the plan has one), the
    launcher run on each with MACHINE set to the node's rank."""
    per_node = min(config.num_gpus, machines.get("gpus_per_machine") or config.num_gpus)
    resources: dict = {"accelerators": f"{config.gpu}:{per_node}"}
    if machines.get("provider"):
        resources["instance_type"] = machines["instance"]
    task = {
        "name": name.lower(),
        "num_nodes": int(machines.get("count") or 1),
        "resources": resources,
        "workdir": ".",
        "setup": "pip install vllm",
        "run": f"MACHINE=$SKYPILOT_NODE_RANK OUTPUT={output} bash {launcher}",
    }
    head = (f"# SkyPilot task for {name} ({config.num_gpus} x {gpu.name}, TP {config.tp} x "
            f"DP {config.dp}), written by tuner: sky launch -c {name.lower()} {name}.sky.yaml\n"
            "# Resumable: the launcher writes each result as it completes into "
            f"{Path(output).with_suffix('')}.parts/ and a rerun sends only unanswered requests;"
            "\n# on spot machines (sky jobs launch --use-spot) mount a bucket there "
            "(file_mounts) so a recovered job finds what its predecessor wrote.\n")
    return head + yaml.safe_dump(task, sort_keys=False)


def fleet_files(plan: dict, lines: list[str], workload: Workload, model: ModelSpec,
                gpus: dict[str, GPU], *, max_model_len: int, header: str = "",
                quantized_model: str | None = None,
                num_scheduler_steps: int | None = None,
                disable_log_requests: bool = False,
                engine_version: str | None = None) -> dict[str, str]:
    """{file name: text} of a fleet plan (results.json's "fleets" entry): fleet.json, and per
    part its input JSONL, its run-batch launcher and its SkyPilot task; `engine_version`: the
    vLLM release searched (None: the newest); `disable_log_requests`: the search priced the
    API server without its request log, so each launcher's `vllm serve` is started so where
    the release logs by default, as the single run-batch export's is
    (tuner.exports.vllm.v0_server_flags)."""
    parts = plan["parts"]
    shares = plan.get("shares") or [p["requests"] for p in parts]
    cut = split_lines(lines, workload, shares)
    files: dict[str, str] = {}
    for i, (part, part_lines) in enumerate(zip(parts, cut, strict=True)):
        config = ServingConfig(**part["config"])
        name = part_name(i, config)
        files[f"{name}.jsonl"] = "".join(part_lines)
        launcher = f"{name}.run-batch.sh"
        files[launcher] = render_export(
            "run-batch", config, model, gpus[config.gpu], max_model_len=max_model_len,
            header=(f"{header}\nPart {i + 1} of {len(parts)} of the fleet plan "
                    f"{plan['description']}: {len(part_lines)} requests.").strip(),
            input_path=f"{name}.jsonl", output_path=f"{name}.results.jsonl",
            quantized_model=quantized_model, num_scheduler_steps=num_scheduler_steps,
            disable_log_requests=disable_log_requests, engine_version=engine_version)
        files[f"{name}.sky.yaml"] = sky_task(name, config, gpus[config.gpu],
                                             part.get("machines") or {}, launcher,
                                             f"{name}.results.jsonl")
    files["fleet.json"] = json.dumps({**plan, "files": sorted(files)}, indent=2) + "\n"
    return files
