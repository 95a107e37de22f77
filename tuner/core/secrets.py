"""Credentials never leave the process in words: a storage URL's password (and a libpq-style
``password=...``) is masked in every message, log line and stored field that names it."""

from __future__ import annotations

import re

# scheme://user:password@host -> scheme://user:***@host (the password up to the last '@'
# before the host, so an unescaped '@' or '/' in it is masked whole)
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):(?P<pw>[^\s]*)@(?=[^@\s]*(?:\s|$))")
_URL_PASSWORD_SHORT = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):(?P<pw>[^@\s]+)@")
_KEYWORD_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'[^']*'|\"[^\"]*\"|[^\s,;)]+)",
                               re.IGNORECASE)


def mask_secrets(text: str) -> str:
    """`text` with every URL password replaced by ``***`` (``postgresql://user:***@host/db``)
    and every ``password=VALUE`` by ``password=***``; text without credentials is unchanged."""
    if not text or ("@" not in text and "password" not in text.lower()):
        return text
    text = _URL_PASSWORD.sub(lambda m: m["head"] + ":***@", text)
    text = _URL_PASSWORD_SHORT.sub(lambda m: m["head"] + ":***@", text)
    return _KEYWORD_PASSWORD.sub(lambda m: m["head"] + "***", text)


__all__ = ["mask_secrets"]
