"""The engine worker is started in its run folder; the paths it is given must not depend on
where `tuner validate` was started (`--out tuner-out`, the default, is relative)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from tuner.runners.base import run_worker


def test_a_relative_run_folder_reaches_the_worker(tmp_path, monkeypatch):
    # a stand-in "python" that does what a worker does with its two path arguments: read the
    # request, write the result (`python -m tuner.runners._X_worker REQUEST RESULT`)
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/sh\nset -e\ngrep -q \'"job": 7\' "$3"\n'
                    'printf \'{"ok": true, "makespan_s": 1.5}\' > "$4"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.chdir(tmp_path)
    res = run_worker("transformers", str(fake), {"job": 7},
                     Path("tuner-out") / "validation-runs" / "t1", timeout_s=30)
    assert res["ok"] and res["makespan_s"] == 1.5
    assert json.loads((tmp_path / "tuner-out" / "validation-runs" / "t1" / "request.json")
                      .read_text()) == {"job": 7}
