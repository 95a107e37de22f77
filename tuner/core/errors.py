"""The one exception type for errors a user can cause (bad input, impossible config)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path


class TunerError(Exception):
    """A user-caused error. The CLI prints ``str(err)`` as one line and exits non-zero."""

    exit_code = 2


def close_matches_hint(name: str, choices: Iterable[str]) -> str:
    """' Did you mean: A10, A100-40G?' or '' — case-insensitive, for unknown-name errors."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    # Substring hits first: they name the very part ("a100" -> "A100-40G", "A100-80G";
    # "gh200" -> "GH200-96G", before the merely similar "H200")
    hits = [c.lower() for c in choices if name.lower() in c.lower()]
    hits += [h for h in difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.4)
             if h not in hits]
    if not hits:
        return f" Known: {', '.join(sorted(choices))}."
    return f" Did you mean: {', '.join(lowered[h] for h in hits[:4])}?"


def ensure_writable_dir(path: Path, what: str) -> None:
    """Create folder `path` or raise one TunerError line ("Cannot write WHAT to PATH: why")
    before any work starts, so a bad --out never leaves half-written output."""
    if path.exists() and not path.is_dir():
        raise TunerError(f"Cannot write {what} to {path}: it is a file, not a folder.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".tuner-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise TunerError(f"Cannot write {what} to {path}: {exc.strerror or exc}.") from None
