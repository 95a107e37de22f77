"""An engine's own flag name given to tuner: the error names tuner's option and its values."""

import subprocess
import sys

from tuner.core.config import engine_flag_hint


def test_hint_names_tunes_option_and_values_where_the_command_takes_it():
    got = engine_flag_hint("--kv-cache-dtype", {"--kv-bits"})
    assert got == ("; --kv-cache-dtype is vLLM's argument: tuner's --kv-bits sets it "
                   "(auto = --kv-bits 16, fp8 = --kv-bits 8)")
    assert "--weight-bits 8" in engine_flag_hint("--quantization", {"--weight-bits"})
    # a command without the option (the search explores precision): no hint
    assert engine_flag_hint("--quantization", {"--allow-quantization"}) == ""
    assert engine_flag_hint("--no-such-thing", {"--kv-bits"}) == ""


def test_the_cli_says_it_in_one_line():
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "simulate", "-w", "examples/arxiv.jsonl",
                        "-m", "llama-3-8b", "-g", "A40", "--kv-cache-dtype", "fp8"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--kv-bits 8" in lines[0], r.stderr
