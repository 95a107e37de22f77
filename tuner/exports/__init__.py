"""tuner.exports: a ServingConfig as the files a deployment takes, and back.

One module per engine / format, each generated from ServingConfig's field metadata:
:mod:`~tuner.exports.vllm` (engine arguments, ``vllm serve --config`` YAML, ``vllm run-batch``),
:mod:`~tuner.exports.sglang` (``sglang.launch_server``), :mod:`~tuner.exports.json_doc` (every
figure as JSON); :mod:`~tuner.exports.formats` is the registry (format name -> writer and
parser) behind :func:`render_export` / :func:`parse_export`. Every export carries the
``# tuner-config:`` line (JSON: its ``config`` object), so it parses back to the exact
ServingConfig. Import from here: this is the public API.
"""

from tuner.core.config import SGLANG_SCHEDULE_POLICY
from tuner.exports.common import CONFIG_COMMENT_PREFIX
from tuner.exports.formats import (
    EXPORT_FORMATS,
    EXPORT_SUFFIX,
    EXPORTERS,
    ExportCannotStart,
    ExportFormat,
    check_export,
    export_refusal,
    formats_for,
    parse_export,
    render_export,
)
from tuner.exports.json_doc import from_json, to_json
from tuner.exports.sglang import (
    SGLANG_KNOWN_OPTIONS,
    from_sglang_command,
    sglang_server_args,
    to_sglang_command,
)
from tuner.exports.vllm import (
    from_vllm_run_batch,
    from_vllm_yaml,
    to_vllm_run_batch,
    to_vllm_yaml,
    vllm_cli_options,
    vllm_engine_args,
)

__all__ = [
    "CONFIG_COMMENT_PREFIX",
    "EXPORTERS",
    "EXPORT_FORMATS",
    "EXPORT_SUFFIX",
    "SGLANG_KNOWN_OPTIONS",
    "SGLANG_SCHEDULE_POLICY",
    "ExportCannotStart",
    "ExportFormat",
    "check_export",
    "export_refusal",
    "formats_for",
    "from_json",
    "from_sglang_command",
    "from_vllm_run_batch",
    "from_vllm_yaml",
    "parse_export",
    "render_export",
    "sglang_server_args",
    "to_json",
    "to_sglang_command",
    "to_vllm_run_batch",
    "to_vllm_yaml",
    "vllm_cli_options",
    "vllm_engine_args",
]
