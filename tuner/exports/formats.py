"""The export registry: format name -> how to write it and read it back. Adding a format is one
entry here (and its module)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ENGINES, ServingConfig
from tuner.core.errors import TunerError
from tuner.core.units import plural
from tuner.exports import json_doc, ray_data, run_batch, sglang, sglang_offline, vllm
from tuner.exports.common import (
    Deployment,
    RenderOptions,
    separate_engines_misfit,
    vllm_parser_check,
)


@dataclass(frozen=True)
class ExportFormat:
    suffix: str  # file name suffix
    render: Callable[[Deployment, RenderOptions], str]
    parse: Callable[..., ServingConfig]  # (text, *, gpu=None): every export parses back
    # the vLLM engine argument lists the export holds (text -> [argv]), checked against the
    # installed vLLM's own parser (check_export); None: not a vLLM export
    engine_argv: Callable[[str], list[list[str]]] | None = None
    title: str = ""  # its name in the report ('' -> the format's name)
    how: str = ""  # how to run it, one line under the title in the report
    # runs the batch itself: written with the job's input and results paths (and the model
    # name the requests use)
    batch: bool = False
    # its input must be OpenAI Batch API JSONL (vllm run-batch reads no other form); a batch
    # export of another input says to convert it
    batch_api_input: bool = False
    # the engines whose simulated plans it writes: vLLM's formats take vLLM plans only (an
    # SGLang plan's knobs are SGLang's); SGLang's take both (a vLLM plan translated, with notes)
    engines: tuple[str, ...] = ("vllm",)
    # runs every DP replica as an engine of its own (not one data-parallel engine): refused for
    # a plan whose replica cannot start so (common.separate_engines_misfit)
    separate_engines: bool = False


#: Formats of ``tuner export --format``, in the order the CLI lists them.
EXPORTERS: dict[str, ExportFormat] = {
    "vllm": ExportFormat(
        ".vllm.yaml", vllm.render_yaml, vllm.from_vllm_yaml, vllm.yaml_engine_argv,
        title="vLLM config (YAML)",
        how="Save as config.yaml; run the `vllm serve` line its comments give (vllm serve "
        "MODEL --config config.yaml; flags instead for releases before 0.6.0)"),
    "vllm-run-batch": ExportFormat(
        ".vllm-run-batch.sh", vllm.render_run_batch, vllm.from_vllm_run_batch,
        vllm.run_batch_engine_argv, title="vllm run-batch",
        how="Run as is on the GPU machine: reads the batch JSONL and writes the results JSONL.",
        batch=True, batch_api_input=True),
    "sglang": ExportFormat(
        ".sglang.sh", sglang.render_command, sglang.from_sglang_command, title="SGLang",
        how="Starts an SGLang server with these settings; then send the batch to it.",
        engines=ENGINES),
    "sglang-offline": ExportFormat(
        ".sglang-offline.py", sglang_offline.render, sglang_offline.from_sglang_offline_script,
        title="SGLang offline engine (Python)",
        how="Run as is on the GPU machine: sglang.Engine reads the batch JSONL and writes the "
        "results JSONL (resumable).", batch=True, engines=ENGINES),
    "json": ExportFormat(
        ".json", json_doc.render_document, json_doc.from_json, title="JSON (every figure)",
        how="The configuration, predicted figures, memory plan and engine arguments, for "
        "scripts.", engines=ENGINES),
    # at scale: the plan's DP replicas over a split of the workload, and a Ray Data LLM job
    # (whose preprocess reads plain {"prompt", "max_tokens"} lines too)
    "run-batch": ExportFormat(".run-batch.sh", run_batch.render, run_batch.from_run_batch_script,
                              run_batch.engine_argv, batch=True, batch_api_input=True,
                              separate_engines=True),
    "ray-data": ExportFormat(".ray-data.py", ray_data.render, ray_data.from_ray_data_script,
                             ray_data.engine_argv, batch=True, separate_engines=True),
}
EXPORT_FORMATS = tuple(EXPORTERS)
def formats_for(engine: str) -> tuple[str, ...]:
    """The formats that write `engine`'s plans, in the CLI's order."""
    return tuple(name for name, f in EXPORTERS.items() if engine in f.engines)


#: File name suffix of each format.
EXPORT_SUFFIX = {name: fmt.suffix for name, fmt in EXPORTERS.items()}


class ExportCannotStart(TunerError):
    """A format that would write engines which cannot start for this plan (the search skips
    it and says why; `tuner export` refuses it). ``why``: what cannot start, without the
    advice (the search points to the file it wrote instead)."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


def separate_engines_refusal(dep: Deployment) -> str | None:
    """What cannot start when each of ``dep``'s DP replicas runs as an engine of its own (a
    mixture-of-experts plan at dp > 1 whose one replica, holding every expert, does not fit
    its GPUs: common.separate_engines_misfit, the check behind the exports' note), else
    None."""
    misfit = separate_engines_misfit(dep)
    if misfit is None:
        return None
    c = dep.config
    return (f"each of the plan's {c.dp} data-parallel replicas as an engine of its own holding "
            f"every expert of {dep.model.name} on {plural(c.tp, 'GPU')}, which cannot start: "
            f"{misfit.rstrip('.')}")


#: --data-parallel-size (vllm-project/vllm#13923) and --enable-expert-parallel
#: (vllm-project/vllm#14305), both March 2025, are V1 engine arguments (vllm-project/vllm#18702:
#: data parallel "can be only used with v1 engine"): no V0 release (0.5 - 0.7) has them
def release_refusal(fmt: str, dep: Deployment) -> ExportCannotStart | None:
    """A vLLM format whose arguments the plan's release lacks: one data-parallel engine of a
    mixture-of-experts model, or expert parallelism, on a V0 release (tuner prices them as V1
    runs them)."""
    from tuner.exports.vllm import is_v0

    exporter = _exporter(fmt)
    if exporter.engines != ("vllm",) or not is_v0(dep.engine_version, dep.num_scheduler_steps):
        return None
    c = dep.config
    lacks = [flag for flag, needed in (
        ("--data-parallel-size", dep.one_engine and not exporter.separate_engines),
        ("--enable-expert-parallel", c.expert_parallel)) if needed]
    if not lacks:
        return None
    why = (f"vLLM {dep.engine_version} (V0) has no {' nor '.join(lacks)}: a data-parallel engine "
           "and expert parallelism arrived with the V1 engine in 0.8.0")
    return ExportCannotStart(
        f"The {fmt} export of this {dep.model.name} plan (tp {c.tp} x dp {c.dp}"
        f"{', expert parallel' if c.expert_parallel else ''}) needs {' and '.join(lacks)}, "
        f"which {why}; export another trial (--rank K) whose plan uses neither.",
        why)


def export_refusal(fmt: str, dep: Deployment) -> ExportCannotStart | None:
    """The refusal of ``fmt`` for ``dep`` when the format's engines cannot start although the
    plan itself runs (one line naming the formats that do), else None: a separate-engines
    format (run-batch, Ray Data) for a plan whose prediction is one data-parallel engine
    that its replicas alone do not fit (:func:`separate_engines_refusal`); a vLLM format whose
    data-parallel / expert-parallel flags the plan's release lacks (:func:`release_refusal`)."""
    released = release_refusal(fmt, dep)
    if released is not None:
        return released
    if not _exporter(fmt).separate_engines:
        return None
    why = separate_engines_refusal(dep)
    if why is None:
        return None
    # vLLM's own formats run the plan as its one data-parallel engine (vllm._replica_lines)
    one_engine = [f for f, e in EXPORTERS.items()
                  if e.engines == ("vllm",) and not e.separate_engines]
    return ExportCannotStart(
        f"The {fmt} export runs {why}; export it with --format {' or '.join(one_engine)}: "
        f"one data-parallel engine over all {dep.config.num_gpus} GPUs, as predicted.", why)


def _exporter(fmt: str) -> ExportFormat:
    try:
        return EXPORTERS[fmt]
    except KeyError:
        raise TunerError(f"Unknown export format {fmt!r}; choose one of "
                         f"{', '.join(EXPORT_FORMATS)}.") from None


def render_export(fmt: str, config: ServingConfig, model: ModelSpec, gpu: GPU, *,
                  max_model_len: int, header: str = "", kv_capacity_tokens: int | None = None,
                  metrics: dict | None = None, memory: dict | None = None,
                  extra: dict | None = None, input_path: str = "INPUT.jsonl",
                  output_path: str = "OUTPUT.jsonl", served_model_name: str | None = None,
                  quantized_model: str | None = None,
                  num_scheduler_steps: int | None = None,
                  disable_log_requests: bool = False,
                  engine_version: str | None = None) -> str:
    """One export of ``config`` in ``fmt`` (one of :data:`EXPORT_FORMATS`); each format uses the
    options it has a place for. ``quantized_model``: the checkpoint a plan with quantized
    weights serves; a plan whose weights no engine quantizes online (4-bit, INT8) is refused
    without it (one TunerError), never written as the 16-bit checkpoint with a comment.
    ``num_scheduler_steps``: V0 multi-step scheduling as the prediction assumed (vLLM's
    exports write it; tuner.core.engines.priced_scheduler_steps). ``disable_log_requests``: the
    search priced a V0 API server without its request log (the `vllm serve` YAML says so).
    ``engine_version``: the vLLM release the plan was searched for (None: the newest), whose
    spelling of version-dependent arguments the vLLM exports use."""
    exporter = _exporter(fmt)
    if config.engine not in exporter.engines:
        usable = [name for name, f in EXPORTERS.items() if config.engine in f.engines]
        raise TunerError(f"This plan was simulated for {config.engine}: the {fmt} export is "
                         f"{'/'.join(exporter.engines)}'s; export it as {', '.join(usable)}.")
    dep = Deployment(config, model, gpu, max_model_len, kv_capacity_tokens, quantized_model,
                     num_scheduler_steps, disable_log_requests, engine_version)
    dep.check_deployable()
    refusal = export_refusal(fmt, dep)
    if refusal is not None:
        raise refusal
    return exporter.render(dep, RenderOptions(
        header=header, metrics=metrics, memory=memory, extra=extra, input_path=input_path,
        output_path=output_path, served_model_name=served_model_name))


@dataclass(frozen=True)
class ExportCheck:
    """What :func:`check_export_detail` checked: the engine argument lists (as shell words),
    accepted by the parser of vLLM ``vllm_version`` (in ``python``)."""
    argvs: list[str]
    vllm_version: str
    python: str
    # why vLLM could not find the model locally (HF_HUB_OFFLINE, not cached), the arguments
    # then judged with a stand-in folder (tuner.exports.common._VLLM_CHECK); None: it could
    model_lookup: str | None = None

    def summary(self, fmt: str, engine_version: str | None = None) -> str:
        """One line saying what passed and what a parser cannot tell. `engine_version`: the
        release the plan was searched for (None: the newest)."""
        n = len(self.argvs)
        lists = "its engine arguments" if n == 1 else f"its {n} engine argument lists"
        line = (f"checked: vLLM {self.vllm_version}'s argument parser ({self.python}) accepts "
                f"the {fmt} export's option names and value types ({lists}, parsed into "
                "EngineArgs); not checked: the engine's start-up (GPU memory, GPU count, "
                "the model's download), which only a run shows (tuner validate)")
        if self.model_lookup:  # not the arguments' fault: said apart, never as a refusal
            line += (f"; the model itself was not found offline ({self.model_lookup}): "
                     "vLLM will not start until the checkpoint is in the local Hugging Face "
                     "cache (download it, or point --model at a local folder)")
        if engine_version and engine_version not in ("newest", self.vllm_version):
            line += (f"; the plan is for vLLM {engine_version}, whose options may differ from "
                     f"{self.vllm_version}'s")
        return line


def check_export_detail(fmt: str, text: str, *, python: str | None = None) -> ExportCheck | None:
    """Check an export's vLLM engine arguments with the installed vLLM's own parser
    (``EngineArgs.add_cli_args(FlexibleArgumentParser())`` and ``EngineArgs.from_cli_args``,
    run in the Python that has vLLM: ``TUNER_VLLM_PYTHON``, ``.venv-vllm``, or this one): the
    option names and value types, not the engine's start-up. None when the format has no vLLM
    arguments or vLLM is not installed; one TunerError with vLLM's reason when vLLM refuses
    one."""
    exporter = _exporter(fmt)
    if exporter.engine_argv is None:
        return None
    argvs = exporter.engine_argv(text)
    check = vllm_parser_check(argvs, python)
    if check is None:
        return None
    for argv, why in zip(argvs, check.verdicts, strict=True):
        if why is not None:
            raise TunerError(f"vLLM refuses the {fmt} export's arguments ({why}; vLLM "
                             f"{check.vllm_version}'s parser): {' '.join(argv)}")
    return ExportCheck([" ".join(a) for a in argvs], check.vllm_version, check.python,
                       check.model_lookup)


def check_export(fmt: str, text: str, *, python: str | None = None) -> list[str] | None:
    """:func:`check_export_detail`'s argument lists (as shell words), or None."""
    check = check_export_detail(fmt, text, python=python)
    return None if check is None else check.argvs


def parse_export(fmt: str, text: str, *, gpu: str | None = None) -> ServingConfig:
    """The ServingConfig an export of format ``fmt`` describes (inverse of
    :func:`render_export`)."""
    return _exporter(fmt).parse(text, gpu=gpu)
