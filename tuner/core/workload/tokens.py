"""Counting prompt tokens: the model's Hugging Face tokenizer when one is available offline,
else the documented estimate of ~4 characters per token."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.workload.base import one_line

if TYPE_CHECKING:
    from tuner.core.catalog import ModelSpec

#: The offline fallback: ~4 characters per token, the common rule of thumb for English text
#: with GPT/Llama-style BPE vocabularies. It under-counts code, numbers and non-Latin scripts
#: (a Chinese character is often a whole token); pass a tokenizer for exact counts.
CHARS_PER_TOKEN = 4
ESTIMATE_TOKENIZER = "estimate: 4 characters per token (no tokenizer available offline)"
#: Tokens a chat template adds to each message beyond its role and content (the role and the
#: content are counted as the text ``role + "\n" + content``). Llama-3's template wraps a
#: message as <|start_header_id|> ROLE <|end_header_id|> "\n\n" CONTENT <|eot_id|>: three
#: special tokens plus about one for the blank line and the conversation's <|begin_of_text|> /
#: reply header shared out; OpenAI's cookbook counts 3-4 per message for its chat models.
CHAT_MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str) -> int:
    """ceil(len(text) / 4): the documented offline estimate (see `CHARS_PER_TOKEN`)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def chat_message_text(role: str, content: str) -> str:
    """The text of one chat message that is tokenized: role, a newline, then the content.
    Each message then costs `CHAT_MESSAGE_OVERHEAD_TOKENS` more (template tokens)."""
    return f"{role}\n{content}"


class TokenCounter:
    """Per-request prompt token counts, accumulated as the file streams by.

    `add` takes one text piece of request `req` (requests numbered 0, 1, ... in the order they
    are added; a request's pieces are added together). The estimate adds its count at once; a
    real tokenizer buffers up to `BATCH_PIECES` texts and encodes them with `encode_batch`
    (multi-threaded), so no more than one batch of texts is ever held. Totals live in one
    growing int64 array: 8 bytes per request."""

    BATCH_PIECES = 4096

    def __init__(self, tokenizer: Any | None, description: str) -> None:
        self.tokenizer = tokenizer
        self.description = description
        self._totals = np.zeros(1024, dtype=np.int64)
        self._n = 0  # requests seen (highest req + 1)
        self._texts: list[str] = []  # buffered pieces (tokenizer only)
        self._special: list[bool] = []
        self._req: list[int] = []

    def _grow(self, req: int) -> None:
        if req >= self._totals.size:
            bigger = np.zeros(max(2 * self._totals.size, req + 1), dtype=np.int64)
            bigger[: self._totals.size] = self._totals
            self._totals = bigger
        self._n = max(self._n, req + 1)

    def add(self, req: int, text: str, *, special: bool, extra: int = 0) -> None:
        """Count `text` for request `req`, plus `extra` tokens. `special`: add the tokenizer's
        special tokens (BOS) — true for a bare prompt, false for chat messages (whose
        template tokens are in `extra`)."""
        self._grow(req)
        if self.tokenizer is None:
            self._totals[req] += estimate_tokens(text) + extra
            return
        self._totals[req] += extra
        self._texts.append(text)
        self._special.append(special)
        self._req.append(req)
        if len(self._texts) >= self.BATCH_PIECES:
            self._flush()

    def _flush(self) -> None:
        if not self._texts:
            return
        req = np.asarray(self._req, dtype=np.int64)
        special = np.asarray(self._special, dtype=bool)
        for flag in (True, False):
            idx = np.flatnonzero(special == flag)
            if idx.size:
                enc = self.tokenizer.encode_batch([self._texts[i] for i in idx],
                                                  add_special_tokens=flag)
                np.add.at(self._totals, req[idx], np.fromiter((len(e.ids) for e in enc),
                                                               np.int64, idx.size))
        self._texts, self._special, self._req = [], [], []

    def counts(self, n: int) -> np.ndarray:
        """Token counts of requests 0..n-1 (0 for a request without pieces)."""
        self._flush()
        out = np.zeros(n, dtype=np.int64)
        k = min(n, self._n)
        out[:k] = self._totals[:k]
        return out


def tokenizer_file(
    tokenizer_path: str | Path | None, model: ModelSpec | None
) -> tuple[Path | None, bool]:
    """(tokenizer.json path or None, whether the user asked for it explicitly)."""
    if tokenizer_path is not None:
        p = Path(tokenizer_path).expanduser()
        f = p / "tokenizer.json" if p.is_dir() else p
        if not f.is_file():
            raise TunerError(
                f"{f}: tokenizer not found (pass a directory holding tokenizer.json, or the file)."
            )
        return f, True
    source = getattr(model, "source", "") or ""
    if source and source != "catalog":
        p = Path(source).expanduser()
        for d in (p,) if p.is_dir() else (p.parent,) if p.is_file() else ():
            if (d / "tokenizer.json").is_file():
                return d / "tokenizer.json", False
    return None, False


def make_counter(tokenizer_path: str | Path | None, model: ModelSpec | None) -> TokenCounter:
    f, explicit = tokenizer_file(tokenizer_path, model)
    if f is None:
        return TokenCounter(None, ESTIMATE_TOKENIZER)
    try:
        from tokenizers import Tokenizer  # optional dependency
    except ImportError:
        if explicit:
            raise TunerError(
                f"Counting tokens with {f} needs the optional `tokenizers` package "
                "(pip install tokenizers), or leave out the tokenizer to use the "
                "4-characters-per-token estimate."
            ) from None
        return TokenCounter(None, f"{ESTIMATE_TOKENIZER}; {f} found but `tokenizers` is not installed")
    try:
        tok = Tokenizer.from_file(str(f))
    except Exception as exc:  # the library raises a bare Exception for bad files
        raise TunerError(f"{f}: not a Hugging Face tokenizer.json ({one_line(exc)}).") from None
    tok.no_truncation()
    tok.no_padding()
    return TokenCounter(
        tok,
        f"tokenizer {f} (Hugging Face tokenizers; chat: role + content "
        f"+ {CHAT_MESSAGE_OVERHEAD_TOKENS} tokens per message)",
    )

