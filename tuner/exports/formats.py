"""The export registry: format name -> how to write it and read it back. Adding a format is one
entry here (and its module)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tuner.core.catalog import GPU, ModelSpec
from tuner.core.config import ServingConfig
from tuner.core.errors import TunerError
from tuner.exports import json_doc, sglang, vllm
from tuner.exports.common import Deployment, RenderOptions


@dataclass(frozen=True)
class ExportFormat:
    suffix: str  # file name suffix
    render: Callable[[Deployment, RenderOptions], str]
    parse: Callable[..., ServingConfig]  # (text, *, gpu=None): every export parses back


#: Formats of ``tuner export --format``, in the order the CLI lists them.
EXPORTERS: dict[str, ExportFormat] = {
    "vllm": ExportFormat(".vllm.yaml", vllm.render_yaml, vllm.from_vllm_yaml),
    "vllm-run-batch": ExportFormat(".vllm-run-batch.sh", vllm.render_run_batch,
                                   vllm.from_vllm_run_batch),
    "sglang": ExportFormat(".sglang.sh", sglang.render_command, sglang.from_sglang_command),
    "json": ExportFormat(".json", json_doc.render_document, json_doc.from_json),
}
EXPORT_FORMATS = tuple(EXPORTERS)
#: File name suffix of each format.
EXPORT_SUFFIX = {name: fmt.suffix for name, fmt in EXPORTERS.items()}


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
                  output_path: str = "OUTPUT.jsonl", served_model_name: str | None = None) -> str:
    """One export of ``config`` in ``fmt`` (one of :data:`EXPORT_FORMATS`); each format uses the
    options it has a place for."""
    exporter = _exporter(fmt)
    dep = Deployment(config, model, gpu, max_model_len, kv_capacity_tokens)
    return exporter.render(dep, RenderOptions(
        header=header, metrics=metrics, memory=memory, extra=extra, input_path=input_path,
        output_path=output_path, served_model_name=served_model_name))


def parse_export(fmt: str, text: str, *, gpu: str | None = None) -> ServingConfig:
    """The ServingConfig an export of format ``fmt`` describes (inverse of
    :func:`render_export`)."""
    return _exporter(fmt).parse(text, gpu=gpu)
