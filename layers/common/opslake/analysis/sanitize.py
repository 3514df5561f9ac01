"""Poisoning defences for playbook text: what agents wrote must never come back to other agents
as instructions, links or secrets.

The check is positive and lives in :mod:`opslake.analysis.fence`: :func:`is_poisoned` says why a
text may not be served in an entry (``None`` when it may), :func:`injection_reason` why agent text
reads as written to its reader (evidence and prompts). Both look at the text as it arrived, after
Unicode compatibility and confusable normalization; nothing is cleaned before it is checked, so
cleaning can never make a text acceptable. :func:`sanitize_entry_text` only shapes text kept as
evidence for analysts (secrets redacted, markup and URLs removed, cut at a word boundary).
"""

from __future__ import annotations

import re
import unicodedata

from opslake.analysis.fence import (
    ELLIPSIS,
    HTML_TAG,
    endpoint_refusal,
    instruction_refusal,
    label_refusal,
    lesson_refusal,
    served_fields_refusal,
    truncate_words,
    visible,
)
from opslake.ingest.redact import redact

__all__ = [
    "ELLIPSIS",
    "endpoint_refusal",
    "injection_reason",
    "is_poisoned",
    "label_refusal",
    "sanitize_entry_text",
    "served_fields_refusal",
    "truncate_words",
]

# Bounded, and a host starts only where no host character precedes it: linear on "a." * 10000.
_URL = re.compile(
    r"(?i)\b(?:https?|ftp|file|data|javascript)://\S*|\bwww\.[^\s/]+"
    r"|(?<![a-z0-9.\-])(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.){1,10}[a-z]{2,24}(?::\d{2,5})?/\S*"
)
# What is *removed* from evidence (the fence's patterns *detect*, and refuse, a served text): a
# markdown link whole, a scheme-less host with a path; tags and hidden characters are the fence's.
_MARKDOWN = re.compile(r"!?\[[^\]]*\]\([^)]*\)|```|^\s{0,3}#{1,6}\s|^\s*>\s", re.M)
_EMPHASIS = re.compile(r"\*\*|__|`")


#: Characters read past the cut so that a secret straddling it is redacted whole.
_REDACTION_MARGIN = 512


def _head(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text``, without the token the cut splits."""
    if len(text) <= limit or text[limit].isspace():
        return text[:limit]
    parts = text[:limit].rsplit(None, 1)
    return parts[0] if len(parts) == 2 else ""


#: Why ``text`` reads as written to its reader, else ``None``: the fence's
#: :func:`~opslake.analysis.fence.instruction_refusal` (this name is kept for the package's API).
injection_reason = instruction_refusal
#: Why ``text`` must not be served in a playbook entry, else ``None``: the fence's
#: :func:`~opslake.analysis.fence.lesson_refusal` (this name is kept for the package's API).
is_poisoned = lesson_refusal


def sanitize_entry_text(text: str, limit: int) -> str:
    """``text`` shaped to keep as evidence (never served): secrets redacted, URLs, markup and
    control characters removed, whitespace collapsed, at most ``limit`` characters."""
    # only the first few times ``limit`` characters can be kept: the rest is never read. The cut
    # comes after redaction (with a margin, so a secret straddling it is seen whole) and at
    # whitespace (a token the cut splits is dropped, never kept in part)
    keep = max(limit, 0) * 4 + 64
    text = unicodedata.normalize("NFKC", text[: keep + _REDACTION_MARGIN])
    text = visible(text)
    text = _head(redact(text), keep)
    text = _URL.sub("", text)
    text = HTML_TAG.sub(" ", text)
    text = _MARKDOWN.sub(" ", text)
    text = _EMPHASIS.sub("", text)
    text = " ".join(text.split())
    return truncate_words(text, limit)
