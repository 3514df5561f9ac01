"""Secret redaction for agent-supplied text.

Op records flow into a shared lake, into LLM prompts and back into agents' playbooks, so a
secret pasted into an error message must not leave the Lambda. Patterns are deliberately broad
(a false positive costs a few characters of context; a false negative leaks a credential).
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

# (name, pattern, replacement). Order matters: specific token shapes first, generic key=value last.
_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "private_key_block",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S),
        REDACTED,
    ),
    (
        "aws_access_key_id",
        re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"),
        REDACTED,
    ),
    (
        "aws_secret_access_key",
        re.compile(r"(?i)(aws_?secret_?access_?key|secret_?access_?key)(\"?\s*[:=]\s*\"?)[A-Za-z0-9/+=]{40}"),
        r"\1\2" + REDACTED,
    ),
    ("bearer_token", re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]+=*"), r"\1 " + REDACTED),
    ("basic_auth", re.compile(r"(?i)\b(basic)\s+[A-Za-z0-9+/]{8,}=*"), r"\1 " + REDACTED),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]+"), REDACTED),
    ("sk_api_key", re.compile(r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{16,}"), REDACTED),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), REDACTED),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), REDACTED),
    # scheme://user:password@host  -> keep the user and host, drop the password.
    (
        "url_password",
        re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+):[^@\s/]+@"),
        r"\1:" + REDACTED + "@",
    ),
    # password=..., api_key: ..., "token": "..."
    (
        "secret_assignment",
        re.compile(
            r"(?i)(\"?\b(?:password|passwd|pwd|secret|client_secret|api[_-]?key|apikey|access[_-]?token"
            r"|refresh[_-]?token|auth[_-]?token|x-api-key)\b\"?\s*[:=]\s*)(\"?)(?!\[REDACTED\])[^\s\"'&,;}]+"
        ),
        r"\1\2" + REDACTED,
    ),
)


def redact(text: str) -> str:
    """Return ``text`` with every recognised secret replaced by ``[REDACTED]``."""
    if not text:
        return text
    for _name, pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def rule_names() -> list[str]:
    """The names of the redaction rules (documented in the README, asserted by the tests)."""
    return [name for name, _, _ in _RULES]
