"""Secret redaction for agent-supplied text: by shape and by meaning.

Op records flow into a shared lake, into LLM prompts and back into agents' playbooks, so a
secret pasted into an error message, an attribute or an id must not leave the Lambda. A false
positive costs a few characters of context; a false negative leaks a credential. Four layers,
each bounded (no pattern here backtracks more than a fixed window per position, and the text
scanned is capped at :data:`MAX_SCAN_CHARS`):

* **shapes**: provider tokens from gitleaks' rule set (:mod:`opslake.ingest.provider_rules`,
  each rule gated by its keywords and tried only where they are, so a text naming every
  provider costs about what its length does), plus private keys, JWTs, auth headers, URL passwords and
  opslake's own API keys (40 characters of ``[A-Za-z0-9_-]``, as API Gateway and the local
  stack make them);
* **meaning**: the value after a secret-named key (``password=``, ``"api_key": "…"``,
  ``POSTGRES_PASSWORD=``, ``db_password: …``, ``?access_token=``, ``<secret>…</secret>``), the
  rest of an ``Authorization``/``Cookie``/``Set-Cookie`` header, and a credential-looking word
  right after a secret word ("the password is hunter2");
* **wrapped**: URL-encoded and base64 tokens are decoded (bounded), checked, and replaced whole
  when what they wrap holds a secret (past :data:`MAX_DECODED_CHARS` of decoded text per call,
  or :data:`DECODED_ALLOWANCE` more than the text's length, each decoded text counting at least
  :data:`MIN_DECODED_CHARGE`, a token that decodes to text is replaced unchecked);
* **entropy**: a bare token that reads as random (mixed classes, high Shannon entropy) and not as
  an id (ULID, UUID, hex digests, trace ids, opslake's own ``redacted-<32 hex>``, and the public id
  shapes of :func:`public_id`: API object ids, pod names, readable ids, cuid, nanoid, KSUID).

:func:`redact` handles free text; :func:`redact_attribute` a value under a key (the whole value
when the key is secret-named); :func:`redact_label` labels and attribute keys, whose replacement
must stay a valid id; :func:`redact_identifier` ids that tell ops, sessions, traces, agents or
signatures apart (:data:`IDENTITY_FIELDS`): kept as sent unless it holds a credential of a known
shape, then ``redacted-`` and 32 hex characters of its SHA-256, so distinct ids stay distinct and a
retry keeps its id.
"""

from __future__ import annotations

import binascii
import hashlib
import math
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator
from functools import cache, lru_cache
from itertools import islice, pairwise
from urllib.parse import unquote_plus

from opslake.ingest.provider_rules import RULES as PROVIDER_RULES

REDACTED = "[REDACTED]"
# In attribute keys (``[A-Za-z0-9_.:-]``) the brackets are not allowed.
LABEL_REDACTED = "REDACTED"
MAX_SCAN_CHARS = 65_536  # a record is at most 64 KiB; anything longer is cut before scanning
MAX_VALUE_CHARS = 512  # a quoted or unquoted value after a secret-named key
MAX_QUOTED_SECRET_CHARS = 4_096  # a quoted value under a strong key (a PEM key in JSON is ~1.7k)
MAX_ENCODED_CHARS = 4_096  # longest URL-encoded or base64 token that is decoded
MAX_DECODED_CHARS = 8_192  # decoded text scanned per redact() call; past it, wrapped text goes whole
DECODED_ALLOWANCE = 512  # ... and at most this much more than the text's own length (work per byte)
# A text shorter than this holds a secret only after a secret word, in a URL-encoded token or in
# one of these shapes (a bearer token, a URL or curl password, a JWT, Slack tokens): every other
# shape, provider rule, base64 or random-looking token is at least this long (tests check it).
SHORT_TEXT_CHARS = 16
_SHORT_GATE = re.compile(r"(?i)bearer|basic|://|-u|%|xox|xapp|ey")
MIN_DECODED_CHARGE = 64  # the least a decoded text costs of that budget (each check has a fixed cost)
MAX_DEPTH = 2  # base64 inside URL-encoding (or the reverse), no further
# Ids the lake tells things apart by: op_id is the idempotency key ((reporter_id, op_id) dedupes in
# the writer, compaction and the analyzer), session_id and trace_id group ops, agent_id is counted,
# sig_hash names a failure signature. "[REDACTED]" in place of a secret would merge distinct ones,
# so a redacted one becomes REDACTED_ID_PREFIX + a digest of the whole original instead. Labels
# (endpoint, source, error_type, event_kind, task_class) keep "[REDACTED]" in place: they name
# kinds of things, and ops whose label differs only by a secret belong to one group.
IDENTITY_FIELDS = frozenset({"op_id", "session_id", "trace_id", "agent_id", "sig_hash"})
REDACTED_ID_PREFIX = "redacted-"
_ID_PARTS = frozenset({"id", "ids", "uuid", "guid"})  # an attribute key ending so names an id
REDACTED_ID_HEX_CHARS = 32  # 128 bits: no two ids of a reporter collide in practice
# Joints of an id looked at for a token after them (see holds_credential_shape): the first few only,
# in the first MAX_ID_JOINTS_CHARS characters (an id is at most 200; a token fits in the rest).
_ID_JOINT_CHARS = "-_:/.=@,;|+"
_ID_JOINT = re.compile("[" + re.escape(_ID_JOINT_CHARS) + "]")
MAX_ID_JOINTS = 8
MAX_ID_JOINTS_CHARS = 160
MAX_ID_TOKEN_CHARS = 200  # an id's length: the longest token after a joint (a Sentry token is 170)
# In an id, a value assigned ("=" or ":") to a name ending in one of these is a secret
# ("password=hunter2", "job-7:pw=hunter2", "db_pass=…", "access_token=…", "auth:…"); other secret
# words name ids as often as secrets ("session:01HX…", "sid=…"), and a name going on past the word
# names a thing ("password-reset-42", "token-bucket-7", "auth-service-3:run-5").
_ID_SECRET_TERMS = frozenset(
    {
        "password", "passwords", "passwd", "passphrase", "pwd", "pass", "pw", "secret", "secrets",
        "apikey", "privatekey", "accesskey", "secretkey", "clientsecret", "xapikey", "credential",
        "credentials", "token", "auth", "accountkey",
    }
)  # fmt: skip
# An id is a single token: a value with a URL, a query string or JSON in it (a presigned URL under
# "upload_id", '{"token": …}' under "request_id") is text, redacted as text. "=" alone is not enough
# ("sid=8f14…", "dt=2026-11-28/part-0.parquet" are ids): an assignment to a secret name in an id is
# found by _ID_SECRET_TERMS ("AccountName=a;AccountKey=…", "alice;pass=…").
_NOT_AN_ID = re.compile(r"[\s?&{}]|://")
# A base64 id that wraps "user:password" is an HTTP Basic credential ("admin:S3cr3tP4ssw0rd!",
# "x-access-token:<token>"); a GitHub or Relay node id wraps "04:User583231" or "User:42" (no
# lowercase user name, or a short or plain-id second half), which stays an id.
_BASIC_PAIR = re.compile(r"([a-z][A-Za-z0-9._@+\-]{0,63}):([^\s:]{6,128})")
MAX_ID_B64_TOKENS = 4  # base64 tokens of an id decoded per level (ids are short: bounded work)

# ---- secret names --------------------------------------------------------------------------
# A key is split into lowercase parts (snake, kebab, dotted, camelCase); a term is a part or two
# adjacent parts joined ("api", "key" -> "apikey").
_STRONG_TERMS = frozenset(
    {
        "password", "passwords", "passwd", "passphrase", "pwd", "pass", "pw", "secret", "secrets",
        "token", "apikey", "auth", "authorization", "authentication", "credential", "credentials",
        "creds", "cred", "cookie", "cookies", "signature", "bearer", "privatekey", "accesskey",
        "secretkey", "clientsecret", "sessiontoken", "sessionkey", "securitytoken", "masterkey",
        "signingkey", "encryptionkey", "connectionstring", "dsn", "xapikey", "setcookie", "session",
        "sid",
    }
)  # fmt: skip
# Only a value that looks like a credential (long, letters and digits) counts under these.
_WEAK_TERMS = frozenset({"key", "keys", "sig", "tokens", "otp", "nonce", "sessionid"})
# After these words a short value is taken for a password ("password is hunter2").
_PASSWORD_TERMS = frozenset({"password", "passwords", "passwd", "passphrase", "pwd", "pass", "pw"})
# A strong key ending in one of these names a property of the secret, not the secret itself
# ("token_count", "max_tokens", "api_key_name", "password_policy"): weak instead.
_DESCRIPTORS = frozenset(
    {
        "count", "counts", "limit", "limits", "usage", "used", "type", "types", "name", "names",
        "id", "ids", "len", "length", "size", "ttl", "expires", "expiry", "expiration", "url", "uri",
        "path", "file", "header", "field", "env", "var", "policy", "rotation", "required", "enabled",
        "format", "mode", "method", "scheme", "version", "status", "error", "provider", "prefix",
        "budget", "max", "min", "total", "estimate", "rate", "kind", "label", "hint", "source", "hash",
        "digest", "checksum",
    }
)  # fmt: skip
# Keys whose whole value, to the end of the line, is a credential.
_HEADER_TERMS = frozenset({"authorization", "proxyauthorization", "cookie", "setcookie", "xapikey"})
# Values that are clearly not the secret (validation messages, placeholders).
_STOP_VALUES = frozenset(
    {
        "", "null", "none", "nil", "true", "false", "undefined", "required", "missing", "invalid",
        "expired", "empty", "not", "is", "was", "the", "a", "an", "redacted", "masked", "hidden",
        "set", "unset", "incorrect", "wrong", "rejected", "denied", "too", "must", "should", "field",
        "cannot", "has", "needs", "failed", "ok", "error", "success", "unknown",
    }
)  # fmt: skip

# Where a secret-named key may be: the finder looks for the word, then widens to the whole key.
_SECRET_WORDS = ("pass", "pwd", "secret", "token", "key", "auth", "cred", "cookie", "sig", "session", "sid")
_SECRET_WORDS_MORE = ("bearer", "dsn", "otp", "nonce")
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_KEY_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# After the key: its closing quote, then an assignment operator.
_SEPARATOR = re.compile(r"""(\\{0,3}["'`])?[ \t]{0,8}(?::=|=>|\?=|::?|==?|\|\|)(?!//)[ \t]{0,8}""")
# A quoted value ends at its own kind of quote (escapes allowed inside, so a JSON string holding
# other quotes or \" is taken whole); a bare value at whitespace, a quote or a separator.
# The closing quote carries as many backslashes as the opening one (JSON inside a JSON string).
_QUOTED = r"""(?P<e_{n}>\\{{0,3}}){q}(?P<{n}>(?:\\.|[^{q}\\\r\n]){{0,{limit}}}?)(?<!\\)(?P=e_{n}){q}"""
_VALUE = re.compile(
    "|".join(
        _QUOTED.format(q=q, n=name, limit=MAX_QUOTED_SECRET_CHARS)
        for q, name in (('"', "dq"), ("'", "sq"), ("`", "bq"))
    )
    # an & ends a bare value only where the next query parameter starts (?token=abc&page=2): inside
    # a password (Tr0ub4dor&3xyz) it is part of the secret
    + r"""|(?P<bare>[^\s"'`,;&<>{}\[\]](?:[^\s"'`,;&<>]|&(?![\w.%\-]{1,64}=)){0,"""
    + str(MAX_VALUE_CHARS - 1)
    + "})"
)
_ASSIGN = re.compile(r"[=:]")
_REST_OF_SECRET = re.compile(r"""[^\s"'`,;&<>{}\[\]]{1,""" + str(MAX_VALUE_CHARS) + "}")
_INNER_KEY = re.compile(r"[A-Za-z_][A-Za-z_.\-]{0,63}")  # a key with no digits: not a password's tail
_HEADER_VALUE = re.compile(r"""[^\r\n"'`]{1,2048}""")
_XML_VALUE = re.compile(r">\s{0,8}([^<]{1," + str(MAX_VALUE_CHARS) + "})</")
# "password is hunter2", "token for bob: abc123…": up to two filler words, then the value.
_ADJACENT = re.compile(
    r"""(?i)(?:[ \t]+(?:is|was|of|set\s+to|to|value|for\s+[\w.@-]{1,64}|[=:]))"""
    r"""{0,2}[ \t]+["'`]?([^\s"'`,;]{6,200})"""
)

# ---- shapes ----------------------------------------------------------------------------------
# (name, gate (lowercase substrings, any), pattern, replacement). Order: multi-line blocks first.
_SHAPES: tuple[tuple[str, tuple[str, ...], re.Pattern[str], str], ...] = (
    (
        "private_key_block",
        ("private key",),
        re.compile(
            r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
            r".*?(?:-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----|$)",
            re.S,
        ),
        REDACTED,
    ),
    (
        "aws_access_key_id",
        (),
        re.compile(
            r"(?<![A-Za-z0-9])(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])"
        ),
        REDACTED,
    ),
    ("bearer_token", ("bearer",), re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]+=*"), r"\1 " + REDACTED),
    ("basic_auth", ("basic",), re.compile(r"(?i)\b(basic)\s+[A-Za-z0-9+/]{8,}=*"), r"\1 " + REDACTED),
    ("jwt", ("ey",), re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), REDACTED),
    (
        "sk_api_key",
        ("sk-",),
        re.compile(r"(?<![A-Za-z0-9])sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{16,}"),
        REDACTED,
    ),
    (
        "github_token",
        ("gh", "github_pat_"),
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
        REDACTED,
    ),
    ("slack_token", ("xox",), re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}"), REDACTED),
    ("google_api_key", ("aiza",), re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), REDACTED),
    # scheme://user:password@host  -> keep the user and host, drop the password (the user may be
    # empty: "redis://:password@cache:6379").
    (
        "url_password",
        ("://",),
        re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]{0,30}://[^/\s:@]{0,256}):[^@\s/]{1,512}@"),
        r"\1:" + REDACTED + "@",
    ),
    # curl -u user:password, --user=user:password: keep the user.
    (
        "curl_user",
        ("-u", "--user"),
        re.compile(r"""(?<!\S)(?:-u|--user)(?:=|[ \t]{1,5})(['"]?)([^\s'":]{1,128}):[^\s'"]{1,256}\1"""),
        r"\1\2:" + REDACTED + r"\1",
    ),
    # AWS secret access keys carry / or +; opslake's API keys are 40 of [A-Za-z0-9_-] (checked below).
    (
        "aws_secret_access_key",
        (),
        # 40 random base64 characters hold every class; a URL path of 40 ("com/v1/objects/<id>")
        # starts with short lowercase segments
        re.compile(
            r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[/+])(?=[A-Za-z0-9/+]{0,39}[A-Z])"
            r"(?=[A-Za-z0-9/+]{0,39}[a-z])(?=[A-Za-z0-9/+]{0,39}[0-9])(?![a-z0-9]{1,16}/[a-z0-9]{1,16}/)"
            r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
        ),
        REDACTED,
    ),
)

_TOKEN_40 = re.compile(r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{40}(?![A-Za-z0-9_\-])")
_BARE_TOKEN = re.compile(r"(?<![A-Za-z0-9_\-+/])[A-Za-z0-9_\-+/]{20,512}(?![A-Za-z0-9_\-+/])")
_HEX_OR_UUID = re.compile(r"(?i)[0-9a-f]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
_UUID = re.compile(r"(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The form opslake stores an identifying id that held a secret in (see redact_identifier): one of its
# own ids, like a ULID, so a client resending it as stored gets it back unchanged.
_REDACTED_ID = re.compile(re.escape(REDACTED_ID_PREFIX) + f"[0-9a-f]{{{REDACTED_ID_HEX_CHARS}}}")
_WORDISH = re.compile(r"[A-Za-z][a-z]{2,}")

# ---- public id shapes --------------------------------------------------------------------------
# Ids that APIs and id generators hand out are random by design, so the entropy layer took them for
# secrets and a client could no longer find its own op or tool call. These shapes are public (they
# identify an object; they authenticate nothing): the entropy layer and the "credential-looking"
# test leave them alone. A credential of a known shape is still caught by the shape and provider
# rules, which run first (Stripe's sk_live_/rk_live_ keys, OpenAI's sk-, GitHub's ghp_, ...).
# Object-id prefixes of OpenAI (tool calls, completions, responses, files, messages, threads, runs,
# assistants, batches, fine-tunes, vector stores), Anthropic (msg_, toolu_) and Stripe-like APIs
# (charges, payment intents, customers, invoices, subscriptions, ...); none of them is a secret's.
_PUBLIC_PREFIXES = (
    "call", "chatcmpl", "cmpl", "resp", "file", "msg", "thread", "run", "asst", "step", "batch", "vs",
    "vsfb", "ftjob", "ftckpt", "fc", "rs", "modr", "toolu", "srvtoolu", "ch", "pi", "cus", "in", "ii",
    "il", "sub", "si", "prod", "price", "evt", "pm", "seti", "src", "card", "txn", "re", "po", "tr",
    "py", "acct", "cs", "dp", "du", "ba", "req", "sched", "prv", "plink", "promo", "trr",
)  # fmt: skip
_PREFIXED_ID = re.compile(r"(?:" + "|".join(_PUBLIC_PREFIXES) + r")[_-](?:(?:test|live)_)?[A-Za-z0-9]{8,64}")
# A lowercase name, then an id: hex of a usual length (run-<32 hex>, req_<24 hex>, build.<40 hex>:
# a digest, an ObjectId, a UUID's hex), a UUID, a ULID, a KSUID or a cuid (report-<ULID>).
_ID_NAME = re.compile(r"[a-z][a-z0-9]{0,15}(?:[-_.][a-z][a-z0-9]{0,15}){0,3}")
_HEX_ID = re.compile(r"[0-9a-f]{12}|[0-9a-f]{16}|[0-9a-f]{24}|[0-9a-f]{32}|[0-9a-f]{40}|[0-9a-f]{64}")
# A path's segment that is a plain name ("tmp", "dt=2026-11-28", "part-00000", "avatar.png").
_PATH_WORD = re.compile(r"(?:[a-z]{1,16}|[0-9]{1,14})(?:[-_.=](?:[a-z]{1,16}|[0-9]{1,14})){0,7}")
# Kubernetes pod names: a workload name, then the controller's random suffixes, drawn from an
# alphabet without vowels and 0/1/3 (k8s.io/apimachinery's rand.String): <name>-<hash>-<5>, <name>-<5>.
_K8S = "[bcdfghjklmnpqrstvwxz2456789]"
_POD_NAME = re.compile(rf"[a-z0-9](?:[a-z0-9-]{{0,60}}[a-z0-9])?(?:-{_K8S}{{6,10}})?-{_K8S}{{5}}")
# A readable id: names, numbers and short hex joined by - _ . : ("lh-3a9f1c-OpenStack-17",
# "us-east-1", "job_2026_11_28_nightly"). A generated secret's pieces hold mixed letters and digits.
_READABLE_PIECE = re.compile(r"[0-9]{1,14}|[0-9a-f]{1,12}|[A-Za-z]{1,16}|[a-z]{1,12}[0-9]{1,4}")
_PIECE_SEPARATORS = re.compile(r"[-_.:]")
_CREDENTIAL_PIECES = frozenset({"access", "refresh", "private", "api", "live", "test", "prod", "production"})
# cuid (v1): "c", a base36 millisecond timestamp, a counter, a fingerprint and randomness.
_CUID = re.compile(r"c[0-9a-z]{24}")
_CUID_TIME = (1_262_304_000_000, 4_102_444_800_000)  # 2010 to 2100, in ms
# cuid2 (24 of [a-z0-9], a letter first), nanoid (21 of [A-Za-z0-9_-]), 22-character base62 (a UUID
# in base62) and KSUIDs (27 base62, a timestamp first): id generators' default lengths, taken as ids
# by the entropy layer only (under a secret-named key they are still judged as credentials).
_CUID2 = re.compile(r"[a-z][0-9a-z]{23}")
_NANOID = re.compile(r"[A-Za-z0-9_-]{21}")
_BASE62_22 = re.compile(r"[A-Za-z0-9]{22}")
_KSUID = re.compile(r"[A-Za-z0-9]{27}")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_KSUID_EPOCH, _KSUID_TIME = 1_400_000_000, (1_262_304_000, 4_102_444_800)  # 2010 to 2100, in s
# data: URIs of media: the base64 body is the image, not a secret: never taken for random (what
# decodes to text is still checked; text ones, SVG included, are not media).
_DATA_URI = re.compile(
    r"data:(?:image|audio|video|font)/(?!svg)[A-Za-z0-9.+-]{1,64}(?:;[A-Za-z0-9=.+-]{1,64}){0,4};base64,"
    r"[A-Za-z0-9+/]*={0,2}"
)


def public_id(token: str) -> bool:
    """Whether ``token`` has the shape of a public object id (see above): an API object's prefixed
    id, a name with a hex id, a pod name, a readable id or a cuid; never a credential by itself."""
    if _PREFIXED_ID.fullmatch(token) or _POD_NAME.fullmatch(token) or _cuid(token):
        return True
    pieces = _PIECE_SEPARATORS.split(token)
    if len(pieces) < 2 or not (_named_id(token) or all(_READABLE_PIECE.fullmatch(piece) for piece in pieces)):
        return False
    # a name that says credential makes it one: Mailgun's "key-<32 hex>", Lob's "live_<hex>",
    # Plaid's "access-production-<uuid>"
    return not any(
        piece.isalpha() and (piece.lower() in _CREDENTIAL_PIECES or _SECRET_WORD.search(piece))
        for piece in pieces
    )


def _cuid(token: str) -> bool:
    return bool(_CUID.fullmatch(token)) and _CUID_TIME[0] <= int(token[1:9], 36) <= _CUID_TIME[1]


def _ksuid(token: str) -> bool:
    if not _KSUID.fullmatch(token):
        return False
    number = 0
    for ch in token:
        number = number * 62 + _BASE62.index(ch)
    return _KSUID_TIME[0] <= (number >> 128) + _KSUID_EPOCH <= _KSUID_TIME[1]


def _named_id(token: str) -> bool:
    """A lowercase name, a joint, then a hex id, a UUID, a ULID, a KSUID or a cuid."""
    for joint in _PIECE_SEPARATORS.finditer(token, 1, 64):
        name, body = token[: joint.start()], token[joint.end() :]
        if _ID_NAME.fullmatch(name) and (
            _HEX_ID.fullmatch(body)
            or _UUID.fullmatch(body)
            or _ULID.fullmatch(body)
            or _ksuid(body)
            or _cuid(body)
        ):
            return True
    return False


def _path_of_ids(token: str) -> bool:
    """A path whose every segment is a plain name or an id ("tmp/<KSUID>", "users/<nanoid>")."""
    return all(
        not segment
        or _PATH_WORD.fullmatch(segment)
        or _HEX_OR_UUID.fullmatch(segment)
        or _ULID.fullmatch(segment)
        or public_id(segment)
        or _generated_id(segment)
        for segment in token.split("/")
    )


def _generated_id(token: str) -> bool:
    """An id generator's default shape (cuid2, nanoid, 22-character base62, KSUID): for the entropy
    layer only, since a short key or password of the same length and alphabet reads the same."""
    if _KSUID.fullmatch(token):
        return _ksuid(token)
    return bool(_CUID2.fullmatch(token) or _NANOID.fullmatch(token) or _BASE62_22.fullmatch(token))


_CLASSES = (re.compile(r"[A-Z]"), re.compile(r"[a-z]"), re.compile(r"[0-9]"))
_PATH_OR_SPACE = re.compile(r"[/\\ ]")
_ASCII_DIGIT = re.compile(r"[0-9]")
_ASCII_ALPHA = re.compile(r"[A-Za-z]")
_SYMBOL = re.compile(r"[!@#$%^&*+=~|?<>]")
_PADDING = re.compile(r"={1,2}(?!\w)")
_SWITCH = re.compile(r"[0-9](?=[^0-9])|[^0-9](?=[0-9])")

_URLSAFE = str.maketrans("-_", "+/")
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_URL_TOKEN = re.compile(r"""[^\s"'<>`]{4,""" + str(MAX_ENCODED_CHARS) + "}")
_B64_TOKEN = re.compile(r"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{16," + str(MAX_ENCODED_CHARS) + "}={0,2}")

RULE_NAMES: tuple[str, ...] = (
    *(name for name, _, _, _ in _SHAPES),
    "opslake_api_key",
    "provider_token",
    "secret_header",
    "secret_assignment",
    "secret_xml_element",
    "secret_after_word",
    "url_encoded_secret",
    "base64_secret",
    "high_entropy_token",
)


def rule_names() -> list[str]:
    """The names of the redaction rules (documented in the README, asserted by the tests)."""
    return list(RULE_NAMES)


# ---- helpers ---------------------------------------------------------------------------------
_XLOGX = [0.0, *(c * math.log2(c) for c in range(1, 4_097))]  # c·log2(c), looked up in C


def entropy(text: str) -> float:
    """Shannon entropy in bits per character: log2(n) - Σ c·log2(c) / n over the counts c."""
    if not text:
        return 0.0
    n = len(text)
    counts = Counter(text).values()
    if n < len(_XLOGX):
        return max(0.0, math.log2(n) - sum(map(_XLOGX.__getitem__, counts)) / n)
    return -sum(c / n * math.log2(c / n) for c in counts)


def key_parts(key: str) -> list[str]:
    return [part.lower() for part in _KEY_PARTS.findall(key)]


@lru_cache(maxsize=4096)  # keys repeat; bounded, since a client chooses them
def secret_key_strength(key: str) -> int:
    """2 when everything under ``key`` is a secret, 1 when a credential-looking value is, else 0."""
    parts = key_parts(key)
    if not parts:
        return 0
    terms = set(parts) | {a + b for a, b in pairwise(parts)}
    strong = terms & _STRONG_TERMS
    described = parts[-1] in _DESCRIPTORS and len(parts) > 1 and "".join(parts[-2:]) not in strong
    # a descriptor right after the last strong part also names a property ("llm.token_count.prompt");
    # after an earlier one it does not ("auth_method_password" holds a password)
    last_strong = max(
        (i for i, part in enumerate(parts) if part in strong or (i and parts[i - 1] + part in strong)),
        default=None,
    )
    described = described or (
        last_strong is not None and last_strong + 1 < len(parts) and parts[last_strong + 1] in _DESCRIPTORS
    )
    if strong:
        return 1 if described or "tokens" in parts else 2
    return 1 if terms & _WEAK_TERMS and not described else 0


def _terms(key: str) -> set[str]:
    parts = key_parts(key)
    return set(parts) | {a + b for a, b in pairwise(parts)}


def _tail_terms(key: str) -> set[str]:
    """The terms a key ends in: its last part, and its last two parts joined."""
    parts = key_parts(key)
    return set(parts[-1:]) | {"".join(parts[-2:])}


def is_secret_key(key: str) -> bool:
    """Whether values under ``key`` are redacted whole (``password``, ``x-api-key``, ``DB_TOKEN``)."""
    return secret_key_strength(key) == 2


@lru_cache(maxsize=1024)
def _header_key(key: str) -> bool:
    return "".join(key_parts(key)) in _HEADER_TERMS


def looks_like_credential(value: str, *, min_len: int = 16) -> bool:
    """A value that reads as a key or password rather than a word, a number, a path or an id
    (under a weak name such as ``key`` or ``session_id``, and after a secret word)."""
    if len(value) < min_len or value.lower() in _STOP_VALUES or _PATH_OR_SPACE.search(value):
        return False
    if _UUID.fullmatch(value) or _ULID.fullmatch(value) or public_id(value):
        return False
    if _HEX_OR_UUID.fullmatch(value):
        return len(value) >= 32  # a hex session id or token; shorter hex is a counter or a short hash
    if value.isascii():  # the same tests as below, one C-level search each
        has_digit, has_alpha = bool(_ASCII_DIGIT.search(value)), bool(_ASCII_ALPHA.search(value))
    else:
        has_digit = any(ch.isdigit() for ch in value)
        has_alpha = any(ch.isalpha() for ch in value)
    has_symbol = bool(_SYMBOL.search(value))
    # Short values only after a password word; there a low floor suits short passwords.
    floor = min(3.0, 0.8 * math.log2(len(value))) if min_len < 16 else 3.5
    return has_alpha and (has_digit or has_symbol) and entropy(value) >= floor


def _is_stop_value(value: str) -> bool:
    stripped = value.strip()
    return (
        stripped.lower() in _STOP_VALUES
        or stripped.startswith(REDACTED)
        or set(stripped) <= set("*x•.-_#")  # masks and placeholders: ***, xxxx
        or (stripped.startswith(("${", "{{", "$(")))  # a reference to a secret, not its value
    )


# The base64 and entropy layers ask about the same tokens (a token that is not random reaches both),
# and tokens repeat from op to op (ARNs, URLs, ids): a pure function, bounded cache (≤ 512 chars each).
@lru_cache(maxsize=4096)
def _looks_random(token: str) -> bool:
    """A bare token that reads as generated (a key, a password) and not as one of opslake's ids."""
    core = token.rstrip("=")
    if len(core) < 20 or _HEX_OR_UUID.fullmatch(core) or _ULID.fullmatch(core):
        return False
    if _REDACTED_ID.fullmatch(core) or public_id(token) or _generated_id(token):
        return False  # (with its padding: "…==" is base64, not an id)
    if "/" in token and _path_of_ids(token):
        return False
    upper, lower, digits = (len(pattern.findall(core)) for pattern in _CLASSES)
    if upper >= 2 and lower >= 2 and digits >= 2:
        # Words joined into identifiers ("ResourceNotFoundException2") leave few characters outside words.
        wordy = sum(map(len, _WORDISH.findall(core))) / len(core)
        return wordy < 0.75 and entropy(core) >= 3.6 and not _counting(core)
    if lower >= 4 and digits >= 4 and not upper and len(core) >= 24:  # long, not hex, digits spread through
        switches = len(_SWITCH.findall(core))
        return switches >= 8 and digits <= 0.6 * len(core) and entropy(core) >= 4.0 and not _counting(core)
    return False


def _counting(core: str) -> bool:
    """An alphabet or a counting run ("abcdef…", "0123456789"), not a key (tokens here are ASCII)."""
    head = core[:64]  # a run starts at the front; the rest need not be walked
    return len(_STEP.findall(head)) > len(head) // 2


# gitleaks' gate, all rules at once: one scan for every keyword, then only the rules it names.
_RULES_BY_KEYWORD: dict[str, list[int]] = {}
for _index, (_rule_id, _words, *_rest) in enumerate(PROVIDER_RULES):
    for _word in _words:
        _RULES_BY_KEYWORD.setdefault(_word, []).append(_index)
_SHAPES_BY_GATE: dict[str, set[int]] = {}
for _index, (_name, _gate, _pattern, _replacement) in enumerate(_SHAPES):
    for _word in _gate:
        _SHAPES_BY_GATE.setdefault(_word, set()).add(_index)
_ALL_KEYWORDS = sorted({*_RULES_BY_KEYWORD, *_SHAPES_BY_GATE}, key=len, reverse=True)


_Trie = dict[str, "_Trie"]


def _trie_pattern(words: list[str]) -> str:
    """One regex for many literals, shaped as a trie: the engine branches on each character
    instead of trying every word at every position (about 6 times faster than ``a|b|c``)."""
    trie: _Trie = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: _Trie) -> str:
        alternatives = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not alternatives:
            return ""
        body = alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"
        return f"(?:{body})?" if "" in node else body  # greedy: the longest word at a position

    return build(trie)


# Two ASCII characters in a row ("ab", "78"), counted where they overlap: one C-level scan.
_STEP = re.compile("(?=" + _trie_pattern([chr(c) + chr(c + 1) for c in range(0x20, 0x7E)]) + ")")

# On lowercased text (the common, ASCII case) a case-sensitive trie with a first-character guard
# is about 8 times faster than the same words under (?i); text whose length lowercasing changes
# is scanned with the (?i) form.
_WORD_TRIE = _trie_pattern([*_SECRET_WORDS, *_SECRET_WORDS_MORE])
_SECRET_WORD_LOWER = re.compile(r"(?=[abcdknopst])(?:" + _WORD_TRIE + r"|pw(?![a-z]))")
_SECRET_WORD = re.compile(r"(?i)(?:" + _WORD_TRIE + r"|pw(?![a-z]))")

# A lookahead finds a keyword at every position; the longest one found there implies the shorter
# ones inside it ("sk-ant-api03" holds "sk-") and starts the ones it begins with.
_KEYWORDS = re.compile("(?=(" + _trie_pattern(_ALL_KEYWORDS) + "))")
_IMPLIED = {word: frozenset(w for w in _ALL_KEYWORDS if w in word) for word in _ALL_KEYWORDS}
_STARTS = {word: tuple(w for w in _ALL_KEYWORDS if word.startswith(w)) for word in _ALL_KEYWORDS}
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _lower_in_place(text: str) -> str:
    """``text`` lowercased with every character where it was (``"İ".lower()`` is two characters;
    there only ASCII is lowered), so keyword positions are positions in ``text``."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def _keyword_hits(text: str) -> list[tuple[int, str]]:
    """Each position where a keyword begins, with the longest keyword there."""
    return [(match.start(), match.group(1)) for match in _KEYWORDS.finditer(_lower_in_place(text))]


def _keywords_of(hits: list[tuple[int, str]]) -> set[str]:
    found: set[str] = set()
    for word in {word for _, word in hits}:
        found |= _IMPLIED[word]
    return found


@cache
def _provider_pattern(rule: int) -> re.Pattern[str]:
    return re.compile(PROVIDER_RULES[rule][2])


# "start" rules to try where a keyword begins, by the longest keyword found there.
_START_RULES: dict[str, tuple[int, ...]] = {
    word: tuple(
        sorted(
            {
                r
                for w in _STARTS[word]
                for r in _RULES_BY_KEYWORD.get(w, ())
                if PROVIDER_RULES[r][5] == "start"
            }
        )
    )
    for word in _ALL_KEYWORDS
}


# gitleaks' "semi-generic" rules: a provider's name, then an assignment within a few characters,
# then the secret ("twitter_api_secret = ..."). When the name is a plain list of the rule's own
# keywords, a match at a keyword needs that assignment right after it: one check for all such rules
# there ("twitter" opens 5), instead of one failed try each.
_CONTEXT_AFTER = r"""(?:[ \t\w.-]{0,20})[\s'"]{0,3}(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"""
_ASSIGNMENT_AFTER = re.compile(_CONTEXT_AFTER)
_SEMI_GENERIC = re.compile(r"\(\?i\)\(\?:([a-z0-9_|\-]+)\)" + re.escape(_CONTEXT_AFTER))


# The semi-generic rules: a name, then an assignment, then the secret (see _not_a_value).
_ASSIGNED_RULES = frozenset(i for i, rule in enumerate(PROVIDER_RULES) if _CONTEXT_AFTER in rule[2])


def _needs_assignment(rule: int) -> bool:
    _id, keywords, source, *_ = PROVIDER_RULES[rule]
    named = _SEMI_GENERIC.match(source)
    return named is not None and set(named.group(1).split("|")) <= set(keywords)


@cache
def _start_patterns(word: str) -> tuple[tuple[int, re.Pattern[str], bool], ...]:
    return tuple((rule, _provider_pattern(rule), _needs_assignment(rule)) for rule in _START_RULES[word])


def _provider_matches(
    text: str, hits: list[tuple[int, str]], found: set[str]
) -> Iterator[tuple[int, re.Match[str]]]:
    """Provider rules' matches (with the rule), looked for only where their keywords are, so the work
    per text follows its length and its keywords, not the number of rules they open (a text naming
    all 230 keywords would otherwise be scanned 217 times). Matches may overlap; all are real."""
    resume: dict[int, int] = {}
    for at, word in hits:  # "start": every match begins with a keyword, so try exactly there
        assigned: bool | None = None  # whether an assignment follows one of the keywords here
        for rule, pattern, needs_assignment in _start_patterns(word):
            if at < resume.get(rule, 0):
                continue  # inside this rule's previous match
            if needs_assignment:
                if assigned is None:
                    assigned = any(_ASSIGNMENT_AFTER.match(text, at + len(k)) for k in _STARTS[word])
                if not assigned:
                    continue
            match = pattern.match(text, at)
            if match:
                resume[rule] = match.end()
                yield rule, match
    others = sorted(
        {r for w in found for r in _RULES_BY_KEYWORD.get(w, ()) if PROVIDER_RULES[r][5] != "start"}
    )
    positions: dict[str, list[int]] = {}
    if others:
        for at, word in hits:
            for keyword in _STARTS[word]:
                positions.setdefault(keyword, []).append(at)
    for rule in others:
        pattern = _provider_pattern(rule)
        _id, keywords, _source, _group, _entropy, mode, width = PROVIDER_RULES[rule]
        if mode == "scan":
            for match in pattern.finditer(text):
                yield rule, match
            continue
        # "near": every match holds a keyword and is at most ``width`` long, so it starts at most
        # ``width`` before the keyword's end and ends at most ``width`` after its start. Windows merge;
        # a match is kept only if it starts at or before its window's last keyword (then the text
        # past the window's end is not needed, but for a lookahead's few characters).
        near = sorted((at, len(k)) for k in keywords for at in positions.get(k, ()))
        window: list[int] = []  # lo, hi, last keyword position
        for at, length in near:
            lo, hi = max(0, at + length - width), min(len(text), at + width + 8)
            if window and lo <= window[1]:
                window[1], window[2] = max(window[1], hi), at
                continue
            if window:
                yield from ((rule, m) for m in _in_window(pattern, text, *window))
            window = [lo, hi, at]
        if window:
            yield from ((rule, m) for m in _in_window(pattern, text, *window))


def _in_window(pattern: re.Pattern[str], text: str, lo: int, hi: int, last: int) -> Iterator[re.Match[str]]:
    for match in pattern.finditer(text, lo, hi):
        if match.start() > last:
            return
        yield match


class _Spans:
    """Character spans to replace, applied once at the end (overlaps merge)."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int]] = []

    def add(self, start: int, end: int) -> None:
        if end > start:
            self.spans.append((start, end))

    def covers(self, pos: int) -> bool:
        """Whether ``pos`` is inside a span; the spans must have been added in order, apart."""
        at = bisect_right(self.spans, (pos, math.inf)) - 1
        return at >= 0 and pos < self.spans[at][1]

    def apply(self, text: str, replacement: str = REDACTED) -> str:
        if not self.spans:
            return text
        merged: list[list[int]] = []
        for start, end in sorted(self.spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        out, last = [], 0
        for start, end in merged:
            out.append(text[last:start])
            out.append(replacement)
            last = end
        out.append(text[last:])
        return "".join(out)


# ---- passes ----------------------------------------------------------------------------------
def _shapes(text: str) -> str:
    hits = _keyword_hits(text)
    found = _keywords_of(hits)
    gated = {index for word in found for index in _SHAPES_BY_GATE.get(word, ())}
    for index, (_name, gate, shape, replacement) in enumerate(_SHAPES):
        if not gate or index in gated:
            text = shape.sub(replacement, text)
    spans = _Spans()
    if REDACTED in text:
        hits = _keyword_hits(text)
        found = _keywords_of(hits)
    for rule, match in _provider_matches(text, hits, found):
        group, min_entropy = PROVIDER_RULES[rule][3:5]
        at = group or next((i for i in range(1, (match.lastindex or 0) + 1) if match.group(i)), 0)
        secret = match.group(at)
        if (
            secret
            and REDACTED not in secret
            and entropy(secret) >= min_entropy
            and not (rule in _ASSIGNED_RULES and _not_a_value(text, match, at))
        ):
            spans.add(match.start(at), match.end(at))
    media = _media_spans(text)
    for match in _TOKEN_40.finditer(text):  # opslake's API keys (and other 40-character keys)
        token = match.group(0)
        if media.covers(match.start()):
            continue  # 40 characters between a "/" and a "+" of an image's base64
        if any(c.isupper() for c in token) and any(c.islower() for c in token) and entropy(token) >= 4.0:
            spans.add(match.start(), match.end())
    return spans.apply(text)


# gitleaks' semi-generic rules take ", " for an assignment ("password", "hunter22") and allow words
# between the name and it: in '{"subject": "password reset", "category": "account"}' the next JSON
# key was taken for the password. A quoted token followed by a colon is a key; after a phrase
# ("password reset", …) a comma ends a list item, not a name.
_KEY_AFTER = re.compile(r"""[ \t]{0,8}:(?![:=])""")
_PHRASE_THEN_COMMA = re.compile(r"""[\w.-]*[ \t]+[\w.-][ \t\w.-]*[\s'"]{0,3},""")


def _not_a_value(text: str, match: re.Match[str], at: int) -> bool:
    """Whether a semi-generic provider match took a quoted key or a list item for the secret."""
    start, end = match.start(at), match.end(at)
    quotes = ('"', "'", "`")
    if text[end - 1 : end] not in quotes and text[end : end + 1] in quotes:
        end += 1  # the group stopped inside the quotes
    quoted = text[start : start + 1] in quotes or text[start - 1 : start] in quotes
    if quoted and _KEY_AFTER.match(text, end):
        return True
    before = text[match.start() : match.start(at)]
    return bool(_PHRASE_THEN_COMMA.match(before)) and "=" not in before and ":" not in before


def _key_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """The whole key around a secret word (at most 64 characters either side)."""
    floor = max(0, start - 64)
    while start > floor and text[start - 1] in _KEY_CHARS:
        start -= 1
    limit = min(len(text), end + 64)
    while end < limit and text[end] in _KEY_CHARS:
        end += 1
    return start, end


def _meaning(text: str, *, only: frozenset[str] | None = None) -> str:
    """Values after secret-named keys, secret headers, XML elements and "password is …" (with
    ``only``: values assigned to a key naming one of those terms, nothing else)."""
    spans = _Spans()
    resume = 0
    lowered = text.lower()
    hits = _SECRET_WORD_LOWER.finditer(lowered) if len(lowered) == len(text) else _SECRET_WORD.finditer(text)
    for hit in hits:
        if hit.start() < resume:
            continue
        key_start, key_end = _key_bounds(text, hit.start(), hit.end())
        key = text[key_start:key_end].strip(".-")
        strength = secret_key_strength(key)
        if not strength or public_id(key) or _looks_random(key):
            continue  # an id with "Pw", "key" or "sig" in it ("call_…xrePw7: upstream") names no secret
        if only is not None and not only & _tail_terms(key):
            continue
        resume = key_end
        sep = _SEPARATOR.match(text, key_end)
        if only is not None and not sep:
            continue
        if key_start > 0 and text[key_start - 1] == "<" and text.startswith(">", key_end):
            element = _XML_VALUE.match(text, key_end)
            if element and (strength == 2 or looks_like_credential(element.group(1).strip())):
                spans.add(element.start(1), element.end(1))
            continue
        if sep:
            if _header_key(key):
                value = _HEADER_VALUE.match(text, sep.end())
                if value and not _is_stop_value(value.group(0)):
                    spans.add(value.start(), value.end())
                    resume = value.end()
                continue
            value_at = sep.end()
            if text.startswith(REDACTED, value_at):
                # a shape took the front of the value; what sticks to it is the rest of the secret
                # ("password=[REDACTED]WJyn…" when a provider rule's token is shorter than the value)
                rest = _REST_OF_SECRET.match(text, value_at + len(REDACTED))
                if rest:
                    spans.add(rest.start(), rest.end())
                    resume = rest.end()
                continue
            value = _VALUE.match(text, value_at)
            if not value:
                continue
            name = value.lastgroup or "bare"  # dq, sq, bq (quoted) or bare
            secret = value.group(name)
            inner = _ASSIGN.split(secret, maxsplit=1)
            if (
                name == "bare"
                and len(inner) == 2
                and _INNER_KEY.fullmatch(inner[0])
                and secret_key_strength(inner[0])
            ):
                continue  # "token: password=hunter2": the inner assignment is redacted on its own
            if name != "bare" and len(secret) > MAX_VALUE_CHARS and strength < 2:
                continue
            if _is_stop_value(secret) or (strength == 1 and not looks_like_credential(secret)):
                continue
            spans.add(value.start(name), value.end(name))
            resume = value.end()
            continue
        if strength == 2:
            adjacent = _ADJACENT.match(text, key_end)
            if adjacent:
                secret = adjacent.group(1)
                min_len = 6 if _PASSWORD_TERMS & set(key_parts(key)) else 16
                if not _is_stop_value(secret) and looks_like_credential(secret, min_len=min_len):
                    spans.add(adjacent.start(1), adjacent.end(1))
                    resume = adjacent.end()
    return spans.apply(text)


class _Budget:
    """Decoded characters one :func:`redact` call may still scan. Past it, a token that decodes
    to text is replaced unseen: work stays bounded and the failure is safe (over-redaction)."""

    def __init__(self, chars: int = MAX_DECODED_CHARS) -> None:
        self.chars = chars

    def take(self, text: str) -> bool:
        # A decoded text costs at least MIN_DECODED_CHARGE: each check has a fixed cost (all four
        # layers run), so many tiny tokens ("%41%42 " a thousand times) must not cost more per
        # byte than a few long ones.
        self.chars -= max(len(text), MIN_DECODED_CHARGE)
        return self.chars >= 0

    @property
    def spent(self) -> bool:
        return self.chars < 0


def _wrapped(text: str, depth: int, budget: _Budget) -> str:
    """URL-encoded and base64 tokens whose decoded form holds a secret are replaced whole."""
    if depth >= MAX_DEPTH:
        return text
    spans = _Spans()
    if "%" in text:
        for match in _URL_TOKEN.finditer(text):
            token = match.group(0)
            if not _PERCENT.search(token):
                continue
            if budget.spent:  # %XX always decodes to something else: replaced unseen
                spans.add(match.start(), match.end())
                continue
            decoded = unquote_plus(token)
            if decoded != token and (
                not budget.take(decoded) or _redact(decoded, depth + 1, budget) != decoded
            ):
                spans.add(match.start(), match.end())
    media = _media_spans(text)
    for match in _B64_TOKEN.finditer(text):
        token = match.group(0)
        if spans.covers(match.start()) or REDACTED in token:
            continue
        core = token.rstrip("=")
        media_body = media.covers(match.start())  # decoded (text hidden in it is checked), never random
        if not media_body and len(core) <= 512 and core.count("/") < 2 and _looks_random(token):
            spans.add(match.start(), match.end())  # the entropy layer takes it whole: no need to decode
            continue
        decoded_text = _b64_text(token)
        if decoded_text is None:
            continue
        if not budget.take(decoded_text) or _redact(decoded_text, depth + 1, budget) != decoded_text:
            spans.add(match.start(), match.end())
    return spans.apply(text)


def _b64_text(token: str) -> str | None:
    """The printable text a base64 token wraps, or None."""
    core = token.rstrip("=")
    if len(core) < 16 or _HEX_OR_UUID.fullmatch(core) or core.isalpha() or core.isdigit():
        return None
    if "-" in core or "_" in core:
        core = core.translate(_URLSAFE)
    for cut in (0, 1, 2, 3):  # the token may carry a few characters of its neighbours
        body = core[: len(core) - cut] if cut else core
        try:  # what base64.b64decode does (non-alphabet characters are skipped), minus its checks
            raw = binascii.a2b_base64(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            continue
        try:
            decoded = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < len(raw) - 9:
                return None  # a cut changes only the last bytes: the shorter ones fail here too
            continue
        if decoded and (decoded.isprintable() or _printable_share(decoded) >= 0.95):
            return decoded
    return None


def _printable_share(text: str) -> float:
    return sum(ch.isprintable() or ch in "\t\r\n" for ch in text) / len(text)


def _media_spans(text: str) -> _Spans:
    """Where ``data:image/…;base64,`` (audio, video, font) bodies are: content, not credentials."""
    media = _Spans()
    if "data:" in text:
        for match in _DATA_URI.finditer(text):
            media.add(match.start(), match.end())
    return media


def _entropy_tokens(text: str) -> str:
    spans = _Spans()
    media = _media_spans(text)
    for match in _BARE_TOKEN.finditer(text):
        if media.covers(match.start()):
            continue
        padded = _PADDING.match(text, match.end()) is not None  # "…==": base64, never an id
        for piece in _split_path(match.group(0), match.start()):
            last = piece[1] + len(piece[0]) == match.end()
            if _looks_random(piece[0] + "=" if padded and last else piece[0]):
                spans.add(piece[1], piece[1] + len(piece[0]))
    return spans.apply(text)


def _split_path(token: str, offset: int) -> list[tuple[str, int]]:
    """A token with ``/`` is checked whole (base64) and, when it reads as a path, per segment."""
    if "/" not in token or token.count("/") < 2:
        return [(token, offset)]
    pieces, pos = [], offset
    for segment in token.split("/"):
        pieces.append((segment, pos))
        pos += len(segment) + 1
    return pieces


# A UUID (hex and dashes) is left as it is by every layer unless a keyword made of hex digits and
# dashes is in it ("4b1d", "a3-"): no secret word, no ungated shape fits in one, and the base64 and
# entropy layers exempt UUIDs. Client op ids are mostly UUIDs, one per op: this skips the four
# passes for them (about a quarter of ingest's redaction time at volume).
_HEX = frozenset("0123456789abcdef-")
_HEX_KEYWORDS = tuple(word for word in _ALL_KEYWORDS if set(word) <= _HEX)
_UUID_SKIPS_MEANING = not any(set(word) <= _HEX for word in (*_SECRET_WORDS, *_SECRET_WORDS_MORE, "pw"))


def _plain_uuid(text: str) -> bool:
    """Whether ``text`` is a UUID that no layer can change (see :data:`_HEX_KEYWORDS`)."""
    if len(text) != 36 or not _UUID_SKIPS_MEANING or not _UUID.fullmatch(text):
        return False
    lowered = text.lower()
    return not any(word in lowered for word in _HEX_KEYWORDS)


def _redact(text: str, depth: int, budget: _Budget) -> str:
    if len(text) < SHORT_TEXT_CHARS and not (_SHORT_GATE.search(text) or _SECRET_WORD.search(text)):
        return text  # nothing the layers find fits in it (attribute keys and values, small ids)
    if _plain_uuid(text):
        return text
    text = _shapes(text)
    text = _meaning(text)
    text = _wrapped(text, depth, budget)
    return _entropy_tokens(text)


def redact(text: str) -> str:
    """Return ``text`` with every recognised secret replaced by ``[REDACTED]``."""
    if not text:
        return text
    if len(text) > MAX_SCAN_CHARS:
        text = text[:MAX_SCAN_CHARS]
    return _redact(text, 0, _Budget(min(MAX_DECODED_CHARS, DECODED_ALLOWANCE + len(text))))


@lru_cache(maxsize=1024)
def identity_key(key: str) -> bool:
    """Whether an attribute key names an id (``gen_ai.tool.call.id``, ``otel.span_id``, ``user_id``)
    and no secret (``session_id`` and ``api_key_id`` are judged by their secret word)."""
    parts = key_parts(key)
    return bool(parts) and parts[-1] in _ID_PARTS and secret_key_strength(key) == 0


def redact_attribute(key: str, value: str) -> str:
    """A value under ``key``: whole when the key is secret-named; an id under a key naming one (a
    tool-call id) like an identifying id (:func:`redact_identifier`) when it is one token; else
    (a URL, a query string, JSON under "upload_id") like any text."""
    if identity_key(key) and value and id_like(value):
        return redact_identifier(value)
    strength = secret_key_strength(key)
    named = strength == 2 or (strength == 1 and looks_like_credential(value))
    if value and named and not _is_stop_value(value):
        return REDACTED
    return redact(value)


def id_like(value: str) -> bool:
    """Whether ``value`` reads as one id: at most an id's length, no space, URL, query string or
    JSON in it (see :data:`_NOT_AN_ID`)."""
    return len(value) <= MAX_ID_TOKEN_CHARS and not _NOT_AN_ID.search(value)


@lru_cache(maxsize=4096)  # ids and labels repeat from op to op (endpoints, agents, sources)
def redact_label(text: str, *, marker: str = REDACTED) -> str:
    """An id or label with its secret parts replaced by ``marker`` (ids keep ``[REDACTED]``, which
    the id rule allows; attribute keys use :data:`LABEL_REDACTED`)."""
    cleaned = redact(text)
    return cleaned if marker == REDACTED else cleaned.replace(REDACTED, marker)


def redacted_identifier(original: str) -> str:
    """The stored form of an identifying id that held a secret: deterministic (a retry dedupes),
    distinct for distinct ids, and clearly marked. A digest of what a rule took for a secret (a
    provider token, 20+ random-looking characters) cannot be inverted or guessed; see the README
    for the one weak case (a short password inside an id, which a dictionary could confirm)."""
    digest = hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest()
    return REDACTED_ID_PREFIX + digest[:REDACTED_ID_HEX_CHARS]


def holds_credential_shape(text: str) -> bool:
    """Whether ``text`` holds a credential of a known shape: a provider token (gitleaks' rules), a
    private key, a JWT, an AWS key, a bearer or basic header, a URL password, an opslake API key,
    a value assigned to a password or token name; also once URL-encoded or base64-wrapped. A value
    that is not one token (:func:`id_like`: a URL, a query string, JSON) is judged as text is."""
    return _holds_credential_shape(text, 0)


def _holds_credential_shape(text: str, depth: int) -> bool:
    if not id_like(text):
        return redact(text) != text
    if len(text) < SHORT_TEXT_CHARS and not (_SHORT_GATE.search(text) or _SECRET_WORD.search(text)):
        return False  # no shape is shorter (tests/unit/ingest/test_redact_work.py checks the widths)
    if _plain_uuid(text):
        return False
    if _shapes(text) != text or _meaning(text, only=_ID_SECRET_TERMS) != text:
        return True
    # Ids join parts ("agent-<token>", "run:<token>"); a shape whose rule wants a boundary before the
    # token (Azure's "…Q~…") is looked for after each joint too: what follows each of the first few
    # joints and the last one (a token's length of it), one per line, in a single pass. A NUL
    # between them keeps a rule from reading across two (no rule's character class holds one).
    starts = [m.end() for m in islice(_ID_JOINT.finditer(text, 0, MAX_ID_JOINTS_CHARS), MAX_ID_JOINTS)]
    if len(starts) == MAX_ID_JOINTS or len(text) > MAX_ID_JOINTS_CHARS:  # joints past those looked at
        last = max(map(text.rfind, _ID_JOINT_CHARS)) + 1
        if last and (not starts or last > starts[-1]):
            starts.append(last)
    windows = [text[at : at + MAX_ID_TOKEN_CHARS] for at in starts if len(text) - at >= SHORT_TEXT_CHARS]
    joined = "\n\x00\n".join(windows)
    if windows and _shapes(joined) != joined:
        return True
    return depth < MAX_DEPTH and _wraps_credential(text, depth)


def _wraps_credential(text: str, depth: int) -> bool:
    """Whether a URL-encoded id, or a base64 token in it, decodes to a credential: the same known
    shapes, or a Basic ``user:password`` pair (see :data:`_BASIC_PAIR`)."""
    if "%" in text and _PERCENT.search(text):
        unquoted = unquote_plus(text)
        if unquoted != text and _holds_credential_shape(unquoted, depth + 1):
            return True
    for match in islice(_B64_TOKEN.finditer(text), MAX_ID_B64_TOKENS):
        if not _b64_starts_as_text(match.group(0)):
            continue
        decoded = _b64_text(match.group(0))
        if decoded is not None and (_basic_pair(decoded) or _holds_credential_shape(decoded, depth + 1)):
            return True
    return False


def _b64_starts_as_text(token: str) -> bool:
    """Whether the first six bytes a base64 token wraps can start a text (UTF-8, printable): most
    random ids (the jointed "abc-def-…" is base64 too) fail here, before the whole is decoded."""
    try:
        raw = binascii.a2b_base64(token[:8].translate(_URLSAFE))
    except (binascii.Error, ValueError):
        return False
    try:
        head = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(raw) - 3:  # only a character cut at the end may fail
            return False
        head = raw[: exc.start].decode("utf-8")
    return head.translate(_LINE_CHARS).isprintable()


_LINE_CHARS = str.maketrans("\t\r\n", "   ")


def _basic_pair(decoded: str) -> bool:
    pair = _BASIC_PAIR.fullmatch(decoded)
    if not pair:
        return False
    password = pair.group(2)
    if public_id(password) or _HEX_OR_UUID.fullmatch(password) or _ULID.fullmatch(password):
        return False
    classes = sum(bool(c.search(password)) for c in _CLASSES) + bool(_SYMBOL.search(password))
    return classes >= 2


@lru_cache(maxsize=4096)  # op ids are mostly distinct, but retries and session/trace/agent ids repeat
def redact_identifier(text: str) -> str:
    """An identifying id (:data:`IDENTITY_FIELDS`, a tool-call id): as sent, unless it holds a
    credential of a known shape (:func:`holds_credential_shape`); then :func:`redacted_identifier`
    of it, never ``[REDACTED]`` (two ops would share one id and one be dropped). An id is random by
    design, so neither the entropy layer nor a secret word ("session:…", "token-42") replaces one: a
    client must find its own op by the id it sent."""
    return redacted_identifier(text) if holds_credential_shape(text) else text
