"""Poisoning defences for playbook text: what agents wrote must never come back to other agents
as instructions, links or secrets.

:func:`is_poisoned` says why a text must be refused (``None`` when it is acceptable);
:func:`sanitize_entry_text` cleans an acceptable text for serving (markup, control characters and
runs of whitespace removed, cut at a word boundary). Refuse first, then clean: cleaning alone
would hide what the text tried to do.
"""

from __future__ import annotations

import re
import unicodedata

from opslake.ingest.redact import REDACTED, redact

ELLIPSIS = "…"

_URL = re.compile(
    r"(?i)\b(?:https?|ftp|file|data|javascript)://\S*|\bwww\.[^\s/]+"
    # a bare domain with a path or port: evil.example/x, host.io:8080
    r"|\b(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}(?::\d{2,5})?/\S*"
)
# Zero-width, bidi and other invisible formatting characters used to hide text from a reviewer.
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_HTML_TAG = re.compile(r"<\s*/?\s*[a-zA-Z!][^<>]{0,200}>")
_MARKDOWN = re.compile(r"!?\[[^\]]*\]\([^)]*\)|```|^\s{0,3}#{1,6}\s|^\s*>\s", re.M)
_EMPHASIS = re.compile(r"\*\*|__|`")

# Instructions about the assistant's rules, prompt injection and role-play markers.
_INJECTION: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.I))
    for name, pattern in (
        (
            "ignore instructions",
            r"\b(?:ignore|forget|override|bypass)\b.{0,40}\b(?:instructions?|rules|prompts?|guidelines"
            r"|directives|guardrails|safety)\b",
        ),
        ("disregard", r"\bdisregard\b"),
        ("system prompt", r"\b(?:system|developer|hidden|initial)\s+(?:prompt|message|instructions?)\b"),
        ("new instructions", r"\bnew\s+(?:instructions?|rules)\b|\bfrom now on\b"),
        ("identity change", r"\byou\s+are\s+now\b|\bact\s+as\s+(?:an?|the|if|my)\b|\bpretend\s+(?:to|you)\b"),
        ("role-play", r"\brole[\s-]?play|\bjail\s?break|\bDAN\b|\bdeveloper\s+mode\b"),
        (
            "concealment",
            r"\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|mention|reveal)\b.{0,20}\b(?:user|human"
            r"|operator|anyone)\b|\bwithout\s+telling\b|\bkeep\s+(?:this|it)\s+(?:a\s+)?secret\b",
        ),
        ("prompt disclosure", r"\b(?:reveal|print|show|repeat|leak)\b.{0,30}\b(?:prompt|instructions)\b"),
        (
            "exfiltration",
            r"\b(?:send|upload|forward|email|leak|exfiltrate)\b.{0,40}\b(?:credentials?"
            r"|secrets?|passwords?|api[\s_-]?keys?|tokens?|private\s+keys?)\b",
        ),
        (
            "role marker",
            r"(?:^|\n)\s*(?:system|assistant|developer|user)\s*:|<\|[a-z_]+\|>|\[/?INST\]"
            r"|<<\s*/?SYS\s*>>|###\s*(?:instruction|system)",
        ),
    )
)


def injection_reason(text: str) -> str | None:
    """Why ``text`` reads as an instruction to the assistant (prompt injection), else ``None``."""
    for name, pattern in _INJECTION:
        if pattern.search(text):
            return f"instruction to the assistant ({name})"
    return None


def is_poisoned(text: str) -> str | None:
    """Why ``text`` must not become playbook text, or ``None`` when it may (after cleaning)."""
    if any(unicodedata.category(ch) == "Cc" and ch not in "\t\n\r" for ch in text) or _INVISIBLE.search(text):
        return "control or invisible characters"
    normalized = unicodedata.normalize("NFKC", text)
    if _URL.search(normalized):
        return "contains a URL"
    if REDACTED in normalized or redact(normalized) != normalized:
        return "contains a secret"
    reason = injection_reason(normalized)
    if reason:
        return reason
    if _HTML_TAG.search(normalized) or _MARKDOWN.search(normalized):
        return "contains markup (HTML or markdown)"
    return None


def sanitize_entry_text(text: str, limit: int) -> str:
    """``text`` made safe to serve: secrets redacted, URLs, markup and control characters removed,
    whitespace collapsed, at most ``limit`` characters (cut at a word boundary, ending with …)."""
    text = unicodedata.normalize("NFKC", text)
    text = _INVISIBLE.sub("", text)
    text = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)
    text = redact(text)
    text = _URL.sub("", text)
    text = _HTML_TAG.sub(" ", text)
    text = _MARKDOWN.sub(" ", text)
    text = _EMPHASIS.sub("", text)
    text = " ".join(text.split())
    return truncate_words(text, limit)


def truncate_words(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` characters at a word boundary, marking the cut with …."""
    if len(text) <= limit:
        return text
    cut = text[: max(limit - len(ELLIPSIS), 0)]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + ELLIPSIS
