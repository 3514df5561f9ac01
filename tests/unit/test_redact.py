"""Each secret shape is removed before a record leaves the Lambda; ordinary text is untouched."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from opslake.ingest.redact import REDACTED, redact, rule_names
from opslake.models import OpInput

CASES = {
    "private_key_block": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "MIIEow"),
    "aws_access_key_id": ("creds AKIAIOSFODNN7EXAMPLE leaked", "AKIAIOSFODNN7EXAMPLE"),
    "aws_secret_access_key": (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    "bearer_token": ("Authorization: Bearer eyJhbGciOi.abc-def_123", "eyJhbGciOi.abc-def_123"),
    "basic_auth": ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    "jwt": ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.sflKxwRJSMeKKF2QT4", "sflKxwRJSMeKKF2QT4"),
    "sk_api_key": ("OPENAI_KEY is sk-proj-Ab12Cd34Ef56Gh78Ij90", "sk-proj-Ab12Cd34Ef56Gh78Ij90"),
    "github_token": ("push with ghp_1234567890abcdefghijABCDEFGHIJ", "ghp_1234567890abcdefghijABCDEFGHIJ"),
    "slack_token": ("hook xoxb-123456789012-abcdefghij", "xoxb-123456789012-abcdefghij"),
    "google_api_key": (
        "key=AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    ),
    "url_password": ("connect postgres://svc:hunter2@db.internal:5432/app failed", "hunter2"),
    "secret_assignment": ('{"password": "hunter2", "user": "bob"}', "hunter2"),
}


def test_every_rule_has_a_case() -> None:
    assert set(CASES) == set(rule_names())


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_secret_pattern_is_removed(rule: str) -> None:
    text, secret = CASES[rule]
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


def test_url_redaction_keeps_user_and_host() -> None:
    assert redact("https://bob:pw123@example.com/x") == f"https://bob:{REDACTED}@example.com/x"


@pytest.mark.parametrize(
    "text",
    [
        'column "wrokers" does not exist',
        "timeout after 30000 ms calling /match",
        "worker 12345 not found; see https://example.com/docs",
        "skills: welding, sk-8 forklift",
        "",
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact(text) == text


def test_redaction_applies_to_every_text_field_and_attribute() -> None:
    secret = "sk-live-ABCDEFGHIJKLMNOPQRSTUV"
    op = OpInput.model_validate(
        {
            "endpoint": "/sql",
            "success": False,
            "duration_ms": 1,
            "input_summary": secret,
            "output_summary": secret,
            "error": secret,
            "correction": secret,
            "attributes": {"header": secret},
        }
    ).to_queued(reporter_id="r", received_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert secret not in op.to_message()
