"""Realistic ids of the forms clients send, generated reproducibly, bare and inside text.

Issue 25: the redactor's entropy check took client ids for secrets (``call_`` + 24 base62: 371 of
400 rewritten), so a client could not find its own op. This module makes the corpus both sides of
the fix are measured on: :func:`ids` yields ``(form, id)`` pairs, :data:`PER_FORM` of each form in
:data:`FORMS` (at least 10,000 in all), from one fixed seed; :func:`texts` puts each id in a log
line, an error message or a JSON blob, the way agents report them. Shared by
tests/unit/ingest/test_ids_kept.py (asserts: none rewritten) and bench/bench_ids.py (the rate per form,
before and after, against any copy of the ``opslake`` package).

The shapes follow each generator's or API's published form: OpenAI object ids (``call_``,
``chatcmpl-``, ``resp_``, ``file-``, ``msg_``, ``thread_``, ``run_``), Anthropic's (``msg_01``,
``toolu_01``), Stripe's (``ch_``, ``pi_``, ``cus_``), UUIDs v4 and v7, ULIDs, KSUIDs, cuid and
cuid2, nanoid, 22-character base62, git SHAs, MongoDB ObjectIds, W3C and X-Ray trace ids,
Kubernetes pod names (k8s.io/apimachinery's suffix alphabet), S3 object keys, a name and a hex id
(``run-<32 hex>``, ``req_<24 hex>``) and readable ids (``lh-3a9f1c-OpenStack-17``).

    python tests/data/ids/id_forms.py            # prints the count per form and the corpus digest
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from collections.abc import Callable, Iterator

SEED = 25
PER_FORM = 400
BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
BASE36 = string.digits + string.ascii_lowercase
HEX = "0123456789abcdef"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
NANOID = string.ascii_letters + string.digits + "_-"
K8S = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand: no vowels, no 0/1/3
NOW_MS = 1_795_872_000_000  # 2026-11-28T12:00:00Z: timestamps in time-ordered ids fall around it
WORKLOADS = ("api-server", "checkout", "ingest-worker", "payments-api", "redis", "nginx-ingress", "web")
COMPONENTS = ("OpenStack", "Hadoop", "Spark", "Zookeeper", "Apache", "Nova", "Keystone", "HDFS", "Linux")
EXTENSIONS = ("png", "jpg", "json", "csv", "parquet", "pdf", "txt", "gz")


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _ulid(rng: random.Random) -> str:
    ms = NOW_MS + rng.randrange(-86_400_000 * 30, 86_400_000)
    value = (ms << 80) | rng.getrandbits(80)
    return "".join(CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def _uuid7(rng: random.Random) -> str:
    ms = NOW_MS + rng.randrange(-86_400_000 * 30, 86_400_000)
    value = (ms << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64) | (0b10 << 62) | rng.getrandbits(62)
    return str(uuid.UUID(int=value))


def _ksuid(rng: random.Random) -> str:
    seconds = NOW_MS // 1000 - 1_400_000_000 + rng.randrange(-86_400 * 30, 86_400)
    value = (seconds << 128) | rng.getrandbits(128)
    out = ""
    for _ in range(27):
        value, digit = divmod(value, 62)
        out = BASE62[digit] + out
    return out


def _base36(number: int, width: int) -> str:
    out = ""
    while number:
        number, digit = divmod(number, 36)
        out = BASE36[digit] + out
    return out.rjust(width, "0")


def _pod(rng: random.Random) -> str:
    name = rng.choice(WORKLOADS)
    if rng.random() < 0.7:  # a Deployment's pod: <name>-<pod-template-hash>-<5>
        return f"{name}-{_pick(rng, K8S, rng.choice((9, 10)))}-{_pick(rng, K8S, 5)}"
    return f"{name}-{_pick(rng, K8S, 5)}"  # a Job's or a DaemonSet's pod


def _s3_key(rng: random.Random) -> str:
    day = f"2026/11/{rng.randrange(1, 29):02d}"
    ext = rng.choice(EXTENSIONS)
    templates: tuple[Callable[[], str], ...] = (
        lambda: f"uploads/{day}/{uuid.UUID(int=rng.getrandbits(128), version=4)}.{ext}",
        lambda: f"users/{_pick(rng, NANOID, 21)}/avatar.{ext}",
        lambda: f"exports/{day}/report-{_ulid(rng)}.{ext}",
        lambda: (
            f"raw/dt=2026-11-{rng.randrange(1, 29):02d}/hour={rng.randrange(24):02d}/part-00000-"
            f"{uuid.UUID(int=rng.getrandbits(128), version=4)}-c000.snappy.parquet"
        ),
        lambda: f"blobs/sha256/{_pick(rng, HEX, 64)}",
        lambda: f"tmp/{_ksuid(rng)}.{ext}",
    )
    return rng.choice(templates)()


FORMS: dict[str, Callable[[random.Random], str]] = {
    "uuid4": lambda r: str(uuid.UUID(int=r.getrandbits(128), version=4)),
    "uuid7": _uuid7,
    "ulid": _ulid,
    "ksuid": _ksuid,
    "git_sha": lambda r: _pick(r, HEX, 40),
    "objectid": lambda r: _pick(r, HEX, 24),
    "w3c_trace_id": lambda r: _pick(r, HEX, 32),
    "xray_trace_id": lambda r: f"1-{NOW_MS // 1000 + r.randrange(-86_400, 86_400):08x}-{_pick(r, HEX, 24)}",
    "openai_call": lambda r: "call_" + _pick(r, BASE62, 24),
    "openai_chatcmpl": lambda r: "chatcmpl-" + _pick(r, BASE62, 29),
    "openai_resp": lambda r: "resp_" + _pick(r, HEX, 48),
    "openai_file": lambda r: "file-" + _pick(r, BASE62, r.choice((22, 24))),
    "openai_msg": lambda r: "msg_" + _pick(r, BASE62, 24),
    "openai_thread": lambda r: "thread_" + _pick(r, BASE62, 24),
    "openai_run": lambda r: "run_" + _pick(r, BASE62, 24),
    "anthropic_toolu": lambda r: "toolu_01" + _pick(r, BASE62, 22),
    "stripe_ch": lambda r: "ch_" + _pick(r, BASE62, 24),
    "stripe_pi": lambda r: "pi_" + _pick(r, BASE62, 24),
    "stripe_cus": lambda r: "cus_" + _pick(r, BASE62, 14),
    "base62_22": lambda r: _pick(r, BASE62, 22),
    "cuid": lambda r: (
        "c"
        + _base36(NOW_MS + r.randrange(-86_400_000 * 30, 86_400_000), 8)
        + _base36(r.randrange(36**4), 4)
        + _pick(r, BASE36, 4)
        + _pick(r, BASE36, 8)
    ),
    "cuid2": lambda r: r.choice(string.ascii_lowercase) + _pick(r, BASE36, 23),
    "nanoid": lambda r: _pick(r, NANOID, 21),
    "k8s_pod": _pod,
    "s3_key": _s3_key,
    "prefixed_hex_run": lambda r: "run-" + _pick(r, HEX, 32),
    "prefixed_hex_req": lambda r: "req_" + _pick(r, HEX, 24),
    "readable": lambda r: f"lh-{_pick(r, HEX, 6)}-{r.choice(COMPONENTS)}-{r.randrange(1, 100)}",
}

# Texts: how agents and runtimes report an id. JSON keys are the ones APIs use for ids (a key that
# names a secret, such as "session_token", is judged by its name, not by the id's shape).
TEMPLATES: tuple[str, ...] = (
    "2026-11-28T13:20:01.412Z INFO worker-3 processed {id} in 182 ms",
    "2026-11-28 13:20:01,412 ERROR [dispatcher] retry 2/5 for {id}: upstream timed out",
    "Error: tool call {id} failed: 429 Too Many Requests (retry after 2 s)",
    "ValidationError: object {id} not found; check the id and try again",
    'upstream returned 404 for "{id}"',
    '{{"id": "{id}", "object": "tool_call", "status": "failed"}}',
    '{{"op_id": "{id}", "endpoint": "tool:search", "success": false}}',
    '{{"tool_call_id": "{id}", "name": "lookup", "arguments": "{{\\"q\\": \\"weather\\"}}"}}',
    '{{"trace_id": "{id}", "spans": 12}}',
    '{{"error": {{"message": "No such object: \'{id}\'", "type": "invalid_request_error"}}}}',
    "GET https://api.example.com/v1/objects/{id}?expand=latest -> 200",
)
# S3 object keys also as the S3 API names them. (Under a key named "key" any other random-looking
# value is taken for a credential: that is the key's name speaking, not the id's shape.)
S3_TEMPLATES: tuple[str, ...] = (
    '{{"Bucket": "agent-artifacts", "Key": "{id}"}}',
    "s3://agent-artifacts/{id}",
    "An error occurred (NoSuchKey) when calling the GetObject operation: The specified key does not exist: {id}",
)
# Media in text: a data: URI's base64 body is an image, not a secret (the hostile pass).
DATA_URIS = 200


def ids(seed: int = SEED, per_form: int = PER_FORM) -> Iterator[tuple[str, str]]:
    """``per_form`` ids of every form in :data:`FORMS`, the same ones for the same seed."""
    rng = random.Random(seed)
    for form, make in FORMS.items():
        for _ in range(per_form):
            yield form, make(rng)


def texts(seed: int = SEED, per_form: int = PER_FORM) -> Iterator[tuple[str, str]]:
    """Each id of :func:`ids` inside a template (chosen by a second seeded generator), then
    :data:`DATA_URIS` ``data:image/…;base64,`` URIs in a message."""
    rng = random.Random(seed + 1)
    for form, value in ids(seed, per_form):
        yield form, rng.choice(TEMPLATES + S3_TEMPLATES if form == "s3_key" else TEMPLATES).format(id=value)
    for _ in range(DATA_URIS):
        pixels = bytes(rng.getrandbits(8) for _ in range(rng.randrange(48, 600)))
        kind = rng.choice(("png", "jpeg", "webp", "gif"))
        body = base64.b64encode(b"\x89PNG\r\n\x1a\n" + pixels).decode()
        yield (
            "data_uri",
            f'{{"type": "image_url", "image_url": {{"url": "data:image/{kind};base64,{body}"}}}}',
        )


def digest(seed: int = SEED, per_form: int = PER_FORM) -> str:
    """SHA-256 of the corpus (ids, then texts): the same on every machine for the same seed."""
    sha = hashlib.sha256()
    for pair in (*ids(seed, per_form), *texts(seed, per_form)):
        sha.update(json.dumps(pair).encode())
    return sha.hexdigest()


if __name__ == "__main__":
    from collections import Counter

    counts = Counter(form for form, _ in ids())
    print(json.dumps({"forms": len(counts), "ids": sum(counts.values()), "digest": digest()}))
    for form, value in list(ids(per_form=1)):
        print(f"{form:18} {value}")
