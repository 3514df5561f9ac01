"""The lesson fence: what free text may become part of a served playbook entry, checked by shape.

A served entry is built from validated parts (routes that exist, table and column names from the
catalog, request fields, numbers, error codes) plus bounded free text that passes a *positive*
check (:func:`lesson_refusal`), in this order, on the text as it arrived (nothing is cleaned
before it is checked, so cleaning can never make a text acceptable):

1. bounded: at most :data:`MAX_FREE_TEXT_CHARS` characters;
2. no control or invisible characters, no markup (HTML tags, markdown links, code, headings);
3. then, on its NFKC (compatibility) form, casefolded and with every confusable character replaced
   by the ASCII letter it imitates (Unicode's confusables.txt, via ``confusable_homoglyphs``):
   nothing addressed to a model, AI, assistant, LLM or agent reading it, nor to its reader ("you"
   outside a quoted message); no instruction about a reader's rules, identity or authority, and no
   phrase granting or withdrawing permission or speaking for an authority (the nouns alone — a
   retry policy, admin access — are ordinary); no secret, and no mention of keys, credentials,
   tokens or header values; no network location (URLs, IPs including short and octal forms,
   ``host:port``, a dotted name ending in a top-level domain of data/tlds.txt, defanged forms such
   as ``hxxp``, ``[.]``, ``(dot)``, ``[:]``, ``evil . com``);
4. only a restricted alphabet (ASCII letters, digits, a small punctuation set): a confusable
   letter from another script is refused, a full-width one is read as the ASCII letter it is;
5. English: most words are in :func:`english_words` (48k words from wordfreq, see
   data/english_words.txt) or are validated identifiers;
6. for an action (``grounded=True``): it names at least one validated part.

:func:`instruction_refusal` is the part of step 3 that evidence and prompt text must pass (text
written *to* a reader, asking for credentials, or claiming authority); agent text that fails it is
withheld from prompts (:func:`prompt_text`), which also masks network locations.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from opslake.ingest.redact import REDACTED, redact

MAX_FREE_TEXT_CHARS = 300
MIN_ENGLISH_SHARE = 0.7  # of the words (two letters or more) of a text of MIN_WORDS_JUDGED words or more
MIN_WORDS_JUDGED = 3
#: Longer inputs are refused (checks) or cut (shaping) before any pattern runs: every public
#: function here stays linear, whatever it is handed.
MAX_CHECKED_CHARS = 4000
#: An identifier longer than this that is neither known nor an English word is refused in labels.
MAX_UNKNOWN_IDENTIFIER = 20
ELLIPSIS = "…"
WITHHELD = "[withheld: {reason}]"
LOCATION = "<location>"

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: The normalizer's placeholders (``<num>``, ``<str>``, shown as ``{num}``) and route parameters.
PLACEHOLDERS = (
    "num", "str", "id", "hex", "url", "email", "arn", "path", "uuid", "ts", "date", "time", "ip", "ulid",
    "name", "agent_id",
)  # fmt: skip

# Characters a served text may hold after NFKC (and the typographic ones read as ASCII).
_ALLOWED = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \t\n\r.,;:'\"()[]{}/?&=+-_*%<>|!$"
)
_TYPOGRAPHIC = str.maketrans(
    {"‘": "'", "’": "'", "‚": "'", "“": '"', "”": '"', "„": '"', "–": "-", "—": "-", "…": "..."}
)
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
HTML_TAG = re.compile(r"<\s*/?\s*[a-zA-Z!?][^<>]{0,200}>")
_HTML_TAG = HTML_TAG
_PLACEHOLDER_TAG = re.compile(rf"<(?:{'|'.join(PLACEHOLDERS)})>")  # the normalizer's, not markup
_MARKDOWN = re.compile(
    r"!?\[[^\]\n]*\]\s*[\[(]|```|`[^`\n]+`|^\s{0,3}#{1,6}\s|^\s*>\s|\*\*[^*\n]+\*\*|__[^_\n]+__", re.M
)
_WORD = re.compile(r"[a-z][a-z0-9_]*")
_LETTERS = re.compile(r"[a-z]+")
_PATH = re.compile(r"(?<![\w/])/[A-Za-z0-9_{}:.\-]+(?:/[A-Za-z0-9_{}:.\-]*)*")


# ---- normalization ------------------------------------------------------------------------------
@cache
def _confusables() -> dict[str, str]:
    """Non-ASCII character → the ASCII text it imitates (Unicode confusables.txt, as shipped by
    ``confusable_homoglyphs``; characters with no ASCII look-alike are left out)."""
    from confusable_homoglyphs.confusables import confusables_data

    mapping: dict[str, str] = {}
    for char, glyphs in confusables_data.items():
        if len(char) != 1 or char.isascii():
            continue
        ascii_glyphs = [g["c"] for g in glyphs if g["c"].isascii() and g["c"].strip()]
        if ascii_glyphs:
            mapping[char] = ascii_glyphs[0]
    return mapping


def compatible(text: str) -> str:
    """NFKC (full-width, ligatures, mathematical letters → their plain form) and typographic
    quotes and dashes as ASCII: the form a served text is stored in."""
    return unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHIC)


def skeleton(text: str) -> str:
    """The text as a reader sees it: NFKC, casefolded, every confusable character replaced by the
    ASCII it imitates (Cyrillic і → i, Greek ο → o). Checks run on this form."""
    mapping = _confusables()
    out = []
    for ch in compatible(text):
        # the small letter's look-alike first (Cyrillic І → і → i, not l), else the letter's own (Н → H)
        folded = ch.casefold()
        out.append(mapping.get(folded) or mapping.get(ch) or folded)
    return unicodedata.normalize("NFKC", "".join(out)).casefold()


# ---- validated parts ----------------------------------------------------------------------------
def _route_pattern(route: str) -> re.Pattern[str]:
    parts = [r"[^/\s]+" if p.startswith("{") else re.escape(p) for p in route.strip("/").split("/")]
    return re.compile("/" + "/".join(parts) + "$", re.I)


@dataclass(frozen=True)
class KnownNames:
    """The validated parts an entry may name: routes and endpoints, identifiers (tables, columns,
    request fields, error codes), all compared case-insensitively."""

    routes: frozenset[str] = frozenset()
    identifiers: frozenset[str] = frozenset()
    #: tables and their columns (a dotted name starting with a table must name one of its columns)
    tables: tuple[tuple[str, frozenset[str]], ...] = ()
    _patterns: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)
    #: the routes case-folded (a tool named ``API-post-page`` is named in text read case-folded)
    _folded: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @classmethod
    def of(
        cls,
        routes: Iterable[str] = (),
        identifiers: Iterable[str] = (),
        tables: Mapping[str, Iterable[str]] | None = None,
    ) -> KnownNames:
        kept_routes = frozenset(r for r in routes if endpoint_refusal(r) is None)
        kept_tables = {
            t.lower(): frozenset(c.lower() for c in cols if _is_identifier(c))
            for t, cols in (tables or {}).items()
            if _is_identifier(t)
        }
        names = [*identifiers, *kept_tables, *(c for cols in kept_tables.values() for c in cols)]
        return cls(
            kept_routes,
            frozenset(i.lower() for i in names if _is_identifier(i)),
            tuple(sorted(kept_tables.items())),
            tuple(_route_pattern(r) for r in sorted(kept_routes) if r.startswith("/")),
            frozenset(r.casefold() for r in kept_routes),
        )

    def extended(
        self,
        routes: Iterable[str] = (),
        identifiers: Iterable[str] = (),
        tables: Mapping[str, Iterable[str]] | None = None,
    ) -> KnownNames:
        """These names plus more (e.g. the endpoint a group is about, once it passed
        :func:`endpoint_refusal`; tables and columns read from the Glue catalog)."""
        merged: dict[str, set[str]] = {t: set(cols) for t, cols in self.tables}
        for table, cols in (tables or {}).items():
            merged.setdefault(table.lower(), set()).update(c.lower() for c in cols)
        return KnownNames.of([*self.routes, *routes], [*self.identifiers, *identifiers], merged)

    def columns(self, table: str) -> frozenset[str] | None:
        """A known table's columns (None: no such table)."""
        return next((cols for name, cols in self.tables if name == table.lower()), None)

    def names_route(self, path: str) -> bool:
        return (
            path in self.routes
            or path.casefold() in self._folded
            or any(p.match(path.rstrip("/.,;:)")) for p in self._patterns)
        )

    def knows(self, word: str) -> bool:
        return word.lower() in self.identifiers or word.casefold() in self._folded


def _is_identifier(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name))


@cache
def default_known() -> KnownNames:
    """opslake's own fixed names, the only ones known without data: the error codes the heuristic
    diagnoser knows and the normalizer's placeholders. Tools, routes, arguments, tables and columns
    are read at run time (:class:`opslake.analysis.catalog.known.Vocabulary`: the tool catalog
    learned from traffic and the Glue catalog), never listed in code."""
    from opslake.analysis.heuristics import ERROR_CODES

    return KnownNames.of((), [*ERROR_CODES, *PLACEHOLDERS])


@cache
def english_words() -> frozenset[str]:
    """The English vocabulary (data/english_words.txt: provenance in its header)."""
    text = resources.files("opslake.analysis").joinpath("data/english_words.txt").read_text("utf-8")
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


@cache
def top_level_domains() -> frozenset[str]:
    """The top-level domains a dotted name ending in is a host (data/tlds.txt, from the Public
    Suffix List: provenance in its header)."""
    text = resources.files("opslake.analysis").joinpath("data/tlds.txt").read_text("utf-8")
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


# ---- refusals on the skeleton -------------------------------------------------------------------
def _patterns(*pairs: tuple[str, str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((name, re.compile(pattern, re.I | re.M)) for name, pattern in pairs)


_READER = r"(?:models?|agents?|bots?|readers?|assistants?|ais?|llms?|systems?|you)"
_ADDRESSED = _patterns(
    (
        "names an AI, assistant or LLM",
        r"\b(?:ais?|a\.i\.?|assistants?|llms?|chat\s?bots?|chat\s?gpt|gpt[\s-]?\d\w*|claude|gemini"
        r"|copilot|language\s+models?|ml\s+models?)\b",
    ),
    (
        "addressed to its reader",
        rf"\b{_READER}\b(?:\s+\w+){{0,3}}?\s+(?:reading|processing|parsing|seeing|receiving|ingesting"
        r"|consuming|(?:that|who|which)\s+reads?)\s+(?:this|these|that|the\s+following|it|me|my|our)\b"
        rf"|\b(?:note|message|notice|attention|reminder|instructions?|memo|warning|psst|fyi|hint)s?\s*"
        rf"(?:to|for)\s+(?:the\s+|any\s+|all\s+|every\s+|each\s+)?{_READER}\b"
        rf"|\b(?:dear|hey|hello|hi|attention|listen|yo)\b\s*,?\s+(?:the\s+)?{_READER}\b"
        rf"|\bif\s+you\s+are\s+(?:an?\s+)?{_READER}\b|^\s*{_READER}\s*[:,]",
    ),
)
# The old keyword filter's patterns, kept: they name the reason precisely where they apply.
_INSTRUCTIONS = _patterns(
    (
        "ignore instructions",
        r"\b(?:ignore|forget|override|bypass)\b.{0,40}\b(?:instructions?|rules|prompts?|guidelines"
        r"|directives|guardrails|safety)\b",
    ),
    ("disregard", r"\bdisregard\b"),
    ("system prompt", r"\b(?:system|developer|hidden|initial)\s+(?:prompt|message|instructions?)\b"),
    ("new instructions", r"\bnew\s+(?:instructions?|rules)\b|\bfrom\s+now\s+on\b"),
    ("identity change", r"\byou\s+are\s+now\b|\bact\s+as\s+(?:an?|the|if|my)\b|\bpretend\s+(?:to|you)\b"),
    ("role-play", r"\brole[\s-]?play|\bjail\s?break|\bdan\b(?=\W*$|\s+mode)|\bdeveloper\s+mode\b"),
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
        r"(?:^|\n)\s*(?:system|assistant|developer|user)\s*:|<\|[a-z_]+\|>|\[/?inst\]"
        r"|<<\s*/?sys\s*>>|###\s*(?:instruction|system)",
    ),
    (
        "claims authority",
        r"\b(?:operators?|admin(?:istrator)?s?|owners?|developers?|users?|managers?|security\s+team"
        r"|supervisors?|maintainers?)\b.{0,40}\b(?:approved|authori[sz]ed|permitted|granted|ordered"
        r"|instructed)\b"
        r"|\b(?:is|are|am)\s+(?:now\s+)?(?:an?\s+|the\s+)?(?:admin(?:istrator)?|root|superuser|sudoer)\b"
        r"|\b(?:obey|comply\s+with|unrestricted|without\s+restrictions?|no\s+restrictions?)\b",
    ),
    (
        "asks to skip safeguards",
        r"\b(?:skip|skipping|disable|disabling|turn(?:ing)?\s+off|bypass\w*|circumvent\w*|ignor\w*"
        r"|suspend\w*)\b.{0,30}\b(?:safety|security|guardrails?|safeguards?|moderation|approvals?"
        r"|restrictions?|polic(?:y|ies)|protections?)\b",
    ),
)
_SECRET_NOUN = (
    r"(?:x[\s_-]?api[\s_-]?key|api[\s_-]?keys?|access[\s_-]?keys?|secret[\s_-]?keys?|private[\s_-]?keys?"
    r"|ssh[\s_-]?keys?|signing[\s_-]?keys?|encryption[\s_-]?keys?|license[\s_-]?keys?|secrets?"
    r"|passwords?|passwd|passphrases?|pass\s?codes?|credentials?|creds|bearer|authori[sz]ation"
    r"|auth[\s_-]?(?:tokens?|headers?|codes?)|access[\s_-]?tokens?|id[\s_-]?tokens?|refresh[\s_-]?tokens?"
    r"|session[\s_-]?(?:tokens?|ids?|cookies?|keys?)|cookies?|otps?|2fa|mfa|one[\s-]time\s+codes?"
    r"|recovery\s+codes?|seed\s+phrases?|env(?:ironment)?\s+var(?:iable)?s?|\.env\b"
    r"|headers?\s+values?|values?\s+of\s+(?:your|the|its|their)\s+[\w\s-]{0,30}headers?)"
)
_DISCLOSE = (
    r"(?:paste|send|share|copy|include|insert|put|place|attach|append|embed|reveal|print|echo|dump"
    r"|output|disclose|leak|expose|give|tell|write|report|submit|read\s+out|show|display|forward"
    r"|upload|email)"
)
_CREDENTIAL_ASK = _patterns(
    (
        "asks for keys, credentials or header values",
        rf"\b{_DISCLOSE}\b.{{0,80}}\b{_SECRET_NOUN}"
        rf"|\byour\s+(?:[\w-]+\s+){{0,2}}(?:keys?|tokens?|headers?|{_SECRET_NOUN})\b",
    ),
)
# Served text is an imperative about tools: it never addresses its reader, grants or withdraws
# permission, speaks for an authority or says what older guidance is worth. Authority is refused as
# *phrases* that grant, withdraw or claim it: the nouns alone (a retry policy, file permissions,
# allowed values, admin access, /oauth/authorize) are ordinary words of a lesson or a route.
_SECOND_PERSON = _patterns(
    (
        "addressed to its reader (second person)",
        r"\b(?:you|your|yours|yourself|yourselves|you'?(?:re|ve|ll|d))\b",
    ),
)
_GATE = (
    r"(?:safety|security|checks?|reviews?|approvals?|guardrails?|safeguards?|validation|confirmations?"
    r"|restrictions?|rules|policy|policies|permissions?)"
)
_AUTHORITY = _patterns(
    (
        "speaks of permission or authority",
        r"\b(?:operators?|admins?|administrators?|maintainers?|owners?|security\s+team|management)\s+"
        r"(?:now\s+)?(?:says?|said|lets?|allows?|wants?|permits?|approved|authori[sz]ed|decided|requires?"
        r"|told|granted|agreed|confirmed|signed\s+off|okayed|ok'?d|cleared|blessed|sanctioned|waived)\b"
        r"|\b(?:per|according\s+to|on\s+behalf\s+of)\s+(?:the\s+)?(?:operators?|admins?|administrators?"
        r"|maintainers?|owners?|security\s+team|management)\b"
        r"|\b(?:full|unlimited|unrestricted|elevated|blanket|total)\s+(?:permissions?|access|rights|authority"
        r"|clearance|control)\b"
        r"|\b(?:have|has|got|given|granted|grant|grants|gives?)\s+(?:full\s+|the\s+|explicit\s+)?"
        r"(?:permission|authori[sz]ation|clearance|approval)\b"
        r"|\b(?:have|has|got|given|granted|gets?)\s+(?:now\s+)?(?:admin|root|superuser|sudo|elevated|all)\s+"
        r"(?:rights|privileges|access)\b"
        rf"|\b(?:may|can|should|must|are\s+free\s+to)\s+(?:now\s+)?(?:skip|bypass|ignore|omit|waive|drop)\s+"
        rf"(?:the\s+|any\s+|all\s+)?{_GATE}"
        r"|\b(?:replaces?|overrides?|overrules?|cancels?|voids?|invalidates?)\s+(?:all|any|every|earlier"
        r"|previous|prior|other|older)\b"
        r"|\b(?:permitted|allowed|authori[sz]ed|cleared|entitled)\s+to\s+(?:skip|bypass|ignore|disable|override"
        r"|act|do\s+anything|use\s+any|run\s+any)\b"
        rf"|\b{_GATE}\b.{{0,30}}\b(?:(?:are|is)\s+(?:now\s+)?(?:optional|unnecessary|waived|lifted|off"
        r"|not\s+(?:needed|required))"
        r"|optional\s+now|no\s+longer\s+(?:needed|required|apply|applies|matters?))\b"
        r"|\bno\s+longer\s+(?:needed|required)\b"
        r"|\b(?:earlier|previous|prior|older|old|existing|other)\s+(?:guidance|advice|rules|instructions"
        r"|entries|lessons|playbooks?)\b.{0,20}\b(?:outdated|obsolete|supersed\w*|void|invalid|wrong"
        r"|replaced|no\s+longer)\b"
        r"|\b(?:guidance|advice|rules|instructions|lessons|playbooks?)\s+(?:is|are)\s+(?:now\s+)?(?:outdated"
        r"|obsolete|superseded|void|invalid)\b"
        r"|\bsupersed\w*\s+(?:all|any|every|earlier|previous|prior|other|the\s+rest)\b"
        r"|\bwhoever\b|\breads?\s+this\b|\b(?:reply|respond|answer)\s+only\b|\boptional\s+now\b"
        r"|\bwithout\s+(?:asking|limits?|checks?|approval|permission|confirmation|restrictions?)\b",
    ),
)
# Header *values* (what a request is signed with, what follows a header), never a header's name.
_HEADER_VALUES = _patterns(
    (
        "names keys, credentials or header values",
        r"\bsigned\s+with\b|\bsigning\s+(?:keys?|secrets?|strings?)\b|\bx[\s-]?api\b"
        r"|\b(?:values?|contents?|what(?:ever)?\s+(?:follows|comes\s+after))\s+(?:of|in|after|behind)?\s*"
        r"(?:the\s+|your\s+|its\s+|their\s+|each\s+|every\s+)?[\w\s-]{0,30}\bheaders?\b"
        r"|\bheaders?\s+(?:values?|contents?)\b",
    ),
)
_SERVED_ONLY = _SECOND_PERSON + _AUTHORITY + _HEADER_VALUES
# A quoted error message may say "you" ('You have an error in your SQL syntax'): quoted spans are
# left out of the second-person check only (every other check reads them), and only when the text
# around them says something too.
_QUOTED = re.compile(r"(?<!\w)'[^'\n]{1,120}'(?!\w)|\"[^\"\n]{1,120}\"")


def _served_only_refusal(words: str) -> str | None:
    """The served-only checks: second person (outside a quoted message), authority, header values."""
    unquoted = _QUOTED.sub(" ", words)
    if len(_LETTERS.findall(unquoted)) < 2:
        unquoted = words  # a text that is all quotation is read whole
    return _first(_SECOND_PERSON, unquoted) or _first(_AUTHORITY + _HEADER_VALUES, words)


_CREDENTIAL_WORDS = ("secret", "secrets", "token", "tokens", "password", "passwords", "credential",
                     "credentials", "apikey", "passwd", "bearer", "cookie", "cookies")  # fmt: skip


def _near_credential(words: str) -> str | None:
    """A misspelling (one edit away) of a credential word: ``secrt``, ``passwrd``, ``tokn``."""
    vocabulary = english_words()
    for word in set(_LETTERS.findall(words)):
        if len(word) < 4 or word in vocabulary:
            continue
        if any(_one_edit(word, target) for target in _CREDENTIAL_WORDS):
            return "names keys, credentials or header values (misspelt)"
    return None


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one insertion, deletion or substitution."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i + (len(a) == len(b)) :] == b[i + 1 :]


_CREDENTIAL_MENTION = _patterns(("names keys, credentials or header values", rf"\b{_SECRET_NOUN}\b"))

# Network locations, looked for on the skeleton (so ｈｘｘｐ and һttp are found too).
_DEFANGED = re.compile(
    r"\bh[x*]{2}ps?\b|\bfxp\b|[\[({<]\s*(?:\.|dot|:|/|//|://|at|@)\s*[\])}>]|\(\s*dot\s*\)"
    r"|\b(?:dot)\s+(?:com|net|org|io|ai|dev|co|info|biz|xyz|app|example|local)\b"
)
# Every repetition is bounded and anchored by a lookbehind, so a long run ("a." * 10000) is linear.
_URL = re.compile(
    r"(?<![a-z0-9+.\-])[a-z][a-z0-9+.\-]{0,20}\s{0,3}:\s{0,3}/\s{0,3}/"
    r"|\b(?:mailto|javascript|data|file|tel|ssh|git|s3|gs|smb|ldap)"
    r":\S|\bwww\d?\s*\.|\blocalhost\b|(?<![\w.+-])[\w.+-]{1,64}\s{0,3}@\s{0,3}[\w-]{1,63}\.[\w-]"
    r"|\\\\[\w.-]{1,255}\\"
)
_IPV4 = re.compile(r"(?<![\w.])\d{1,3}(?:\s*\.\s*\d{1,3}){3}(?![\w])")
_IPV6 = re.compile(
    r"(?<![\w:])(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}(?![\w:])|(?<![\w:])(?:[0-9a-f]{1,4}:){1,6}:"
    r"(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){0,5})?(?![\w:])|(?<![\w:])::(?:[0-9a-f]{1,4}:){0,5}[0-9a-f]{1,4}"
)
_HOST_PORT = re.compile(
    r"(?<![\w.\-])([a-z][a-z0-9\-]{0,62}(?:\.[a-z0-9\-]{1,63}){0,8})\s{0,3}:\s{0,3}(\d{2,5})\b(?!\s*(?:ms|s)\b)"
)
_PORT_LABELS = frozenset(
    {"status", "code", "error", "errors", "http", "line", "limit", "count", "page", "row", "rows", "turn",
     "step", "attempt", "retry", "retries", "top", "after", "took", "version", "v"}
)  # fmt: skip
# Locations spelled out in words ("evil at example com", "ten dot zero dot zero dot one", "port 8080").
# "dot" and "point" between numbers are a decimal ("1 point 5") unless there are three parts or more;
# "<word> dot <word>" is judged in code (:func:`_spelled_host`): "the dot notation" is no host.
_NUMBER_WORD = r"(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|\d{1,3})"
_DETERMINER = r"(?:the|a|an|each|every|this|that|these|those|any|some|no|our|my|its|their|his|her|one)"
_SPELLED = re.compile(
    rf"\b{_NUMBER_WORD}(?:\s+(?:dot|point)\s+{_NUMBER_WORD}){{2,}}\b"
    rf"|\b[a-z][\w-]{{0,62}}\s+at\s+(?!{_DETERMINER}\b)[a-z][\w-]{{0,62}}\s+(?:dot\s+)?"
    r"(?:com|net|org|io|co|dev|app|ai)\b"
    r"|\bports?\s*(?:number\s*)?(?:\d{2,5}\b|\{num\}|<num>)"
)
_SPELLED_DOT = re.compile(
    r"(?<![\w-])([a-z0-9][\w-]{0,62})\s+dot\s+([a-z0-9][\w-]{0,62})(\s+dot\s+[a-z0-9])?"
)
# A dot with a space before it ("evil . com", "evil .com": prose puts none there), or a space only
# after it before a top-level domain that is no English word ("evil. com").
_SPACED_DOT = re.compile(r"[a-z0-9_\-](?:\s+\.\s*|\.\s+)([a-z][a-z0-9\-]{1,62})\b")
# An IP address with spaces for dots (10 0 0 1), a hex literal or a long integer (0x7f000001, 2130706433).
_SPACED_IP = re.compile(r"(?<![\w.])\d{1,3}(?:\s+\d{1,3}){3}(?![\w.])")
_NUMERIC_HOST = re.compile(r"\b0x[0-9a-f]{4,}\b|(?<![\w.])\d{8,}(?![\w.])")
# The short and octal forms inet_aton reads as an address: three parts or more (127.0.1, 0177.0.0.1),
# a part with a leading zero (0177.1), or two parts (127.1) right after a verb of connecting or
# fetching, or alone. Two parts elsewhere are a decimal ("1.5", "LIMIT 1.5"), and a version
# ("v1.2", "version 3.11.2") is none.
_SHORT_IPV4 = re.compile(
    r"(?<![\w.])(?<!version\s)(?<!release\s)\d{1,10}(?:\s*\.\s*\d{1,10}){2,3}(?![\w.])"
    r"|(?<![\w.])0\d{1,10}\s*\.\s*\d{1,10}"
    r"|(?<![\w.])0x[0-9a-f]{1,8}(?:\s*\.\s*(?:0x[0-9a-f]{1,8}|\d{1,10})){1,3}(?![\w.])"
    r"|\b(?:fetch|connect|contact|reach|ping|curl|wget|ssh|telnet|visit|browse|open|dial|resolve|host"
    r"|server|address|ip|upload|download|post|send|call)\w*(?:\s+(?:to|from|at|on|via|the|host|server"
    r"|address|ip|it))*\s+\d{1,10}\s*\.\s*\d{1,10}(?![\w.])"
    r"|^\W*\d{1,10}\s*\.\s*\d{1,10}\W*$"
)
_DOTTED = re.compile(r"(?<![\w.\-])[a-z0-9_\-]{1,63}(?:\.[a-z0-9_\-]{1,63})+")


def _spelled_host(sk: str) -> bool:
    """Whether ``sk`` spells a host with the word "dot": three labels or more ("docs dot evil dot
    example"), or a last label that is a top-level domain after a word that is no determiner
    ("evil dot com", not "the dot in", "a dot as")."""
    tlds = top_level_domains()
    for match in _SPELLED_DOT.finditer(sk):
        if match[3] or (not re.fullmatch(_DETERMINER, match[1]) and match[2].strip("-_") in tlds):
            return True
    return False


def _host_label(label: str) -> bool:
    return label.strip("-_") in top_level_domains()


def network_refusal(
    text: str, known: KnownNames | None = None, *, strict: bool = True, tables: bool = True
) -> str | None:
    """Why ``text`` holds a network location, else ``None``. ``strict`` (served text) also refuses
    ``name:port``, short and octal IPv4 forms and any dotted name whose last label is a top-level
    domain (:func:`top_level_domains`) and that is no validated table.column; ``tables``: a dotted
    name that starts with a catalog table must name one of its columns."""
    if len(text) > MAX_CHECKED_CHARS:
        return f"longer than {MAX_CHECKED_CHARS} characters"
    sk = skeleton(text)
    if _DEFANGED.search(sk) or _SPELLED.search(sk) or _spelled_host(sk):
        return "network location (URL, domain or IP): a defanged form"
    if _URL.search(sk):
        return "network location (URL, domain or IP): a URL, e-mail address or host"
    if _IPV4.search(sk) or _IPV6.search(sk):
        return "network location (URL, domain or IP): an IP address"
    if not strict:
        return None
    if _SPACED_IP.search(sk) or _NUMERIC_HOST.search(sk) or _SHORT_IPV4.search(sk):
        return "network location (URL, domain or IP): an address written as numbers"
    for match in _HOST_PORT.finditer(sk):
        if match[1] not in _PORT_LABELS:
            return "network location (URL, domain or IP): host:port"
    vocabulary = english_words()
    for match in _SPACED_DOT.finditer(sk):
        spaced_before = bool(re.match(r"[a-z0-9_\-]\s", match[0]))
        if _host_label(match[1]) and (spaced_before or match[1] not in vocabulary):
            return "network location (URL, domain or IP): a host with spaces around its dot"
    names = known or default_known()
    for match in _DOTTED.finditer(sk):
        labels = [label.strip() for label in match[0].split(".")]
        # table.column, or alias.column (a one-letter alias)
        if names.knows(labels[-1]) and all(names.knows(x) or len(x) == 1 for x in labels):
            continue
        if _host_label(labels[-1]):
            return "network location (URL, domain or IP): a dotted name ending in a top-level domain"
        if tables and names.columns(labels[0]) is not None:
            return "network location (URL, domain or IP): a dotted name that is no known table.column"
    return None


def _first(patterns: tuple[tuple[str, re.Pattern[str]], ...], text: str) -> str | None:
    for name, pattern in patterns:
        if pattern.search(text):
            return name
    return None


def visible(text: str) -> str:
    """``text`` without the characters :func:`lesson_refusal` refuses as hidden: control
    characters read as a space, format, private-use, unassigned and separator characters dropped
    (for shaping evidence; a served text with any of them is refused, never cleaned)."""
    out = []
    for ch in text:
        category = unicodedata.category(ch)
        if category == "Cc" or ch in "\t\n\r":
            out.append(" ")
        elif category not in _INVISIBLE_CATEGORIES:
            out.append(ch)
    return "".join(out)


def _hidden_characters(text: str) -> bool:
    """Control, format (zero-width, bidi), private-use, unassigned or line/paragraph separators."""
    return any(unicodedata.category(ch) in _INVISIBLE_CATEGORIES and ch not in "\t\n\r" for ch in text)


_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_LEET = str.maketrans("013457", "oieast")
# leetspeak is read in words of four or more characters: "a1" and "s3" stay names, not "ai", "se"
_MIXED = re.compile(r"\b(?=[a-z0-9]*[a-z])(?=[a-z0-9]*\d)[a-z0-9]{4,40}\b")


def split_words(text: str) -> str:
    """``text`` with identifiers read as words: camelCase and ``_`` separators as spaces
    (``IgnoreAllPrior_rules`` → ``Ignore All Prior rules``)."""
    return re.sub(r"_+", " ", _CAMEL.sub(" ", compatible(text[:MAX_CHECKED_CHARS])))


def _words_form(text: str) -> str:
    """The skeleton with identifiers' separators read as spaces (``ignore_all_instructions``,
    ``IgnoreAllInstructions``) and leetspeak in words that mix letters and digits read as letters
    (``1gnore`` → ignore, ``pr1or`` → prior)."""
    form = skeleton(split_words(text))
    return _MIXED.sub(lambda m: m[0].translate(_LEET), form)


def instruction_refusal(text: str) -> str | None:
    """Why ``text`` reads as written to its reader, else ``None``: addressed to a model or agent,
    an instruction about a reader's rules, identity or authority, or a request for credentials.
    Checked on the skeleton; the text evidence and prompts may show must pass it."""
    if len(text) > MAX_CHECKED_CHARS:
        return f"longer than {MAX_CHECKED_CHARS} characters"
    if _hidden_characters(text):
        return "control or invisible characters"
    sk, words = skeleton(text), _words_form(text)
    reason = (
        _first(_INSTRUCTIONS, sk)
        or _first(_INSTRUCTIONS, words)
        or _first(_ADDRESSED, words)
        or _first(_CREDENTIAL_ASK, words)
    )
    return f"instruction to the reader ({reason})" if reason else None


# ---- the positive check -------------------------------------------------------------------------
def _alphabet_refusal(form: str) -> str | None:
    outside = sorted({ch for ch in form if ch not in _ALLOWED})
    if not outside:
        return None
    mapping = _confusables()
    if any(ch.casefold() in mapping or ch in mapping for ch in outside):
        return f"confusable characters from another script ({''.join(outside[:5])!r})"
    return f"characters outside the allowed alphabet ({''.join(outside[:5])!r})"


def english_share(text: str, known: KnownNames | None = None) -> tuple[int, float]:
    """(words judged, share of them that are English or validated identifiers). An identifier
    is judged whole when known, else by its parts (``hourly_rate`` → hourly, rate)."""
    names, vocabulary = known or default_known(), english_words()
    judged = hits = 0
    for word in _WORD.findall(skeleton(text)):
        if names.knows(word):
            judged, hits = judged + 1, hits + 1
            continue
        for part in _LETTERS.findall(word):
            if len(part) < 2:
                continue
            judged += 1
            hits += part in vocabulary or names.knows(part)
    return judged, (hits / judged if judged else 1.0)


def names_a_validated_part(text: str, known: KnownNames | None = None) -> bool:
    """Whether ``text`` names a route, table, column, field or error code (or an HTTP method)."""
    names = known or default_known()
    form = compatible(text)
    if any(names.names_route(path) for path in _PATH.findall(form)):
        return True
    if any(re.search(rf"\b{m}\b", form) for m in HTTP_METHODS):
        return True
    return any(names.knows(word) and word not in PLACEHOLDERS for word in _WORD.findall(form.lower()))


def lesson_refusal(
    text: str,
    known: KnownNames | None = None,
    *,
    grounded: bool = False,
    max_chars: int = MAX_FREE_TEXT_CHARS,
) -> str | None:
    """Why ``text`` may not be served in an entry, else ``None`` (steps in the module doc).
    ``grounded``: the text must also name a validated part (actions do)."""
    if not text or not text.strip():
        return "empty"
    if len(text) > max_chars:
        return f"longer than {max_chars} characters"
    if _hidden_characters(text):
        return "control or invisible characters"
    if _HTML_TAG.search(_PLACEHOLDER_TAG.sub("{}", text)) or _MARKDOWN.search(text):
        return "contains markup (HTML or markdown)"
    original, text = text, _without_endpoint_labels(text, known or default_known())
    form = compatible(text)
    if REDACTED in form or redact(form) != form:
        return "contains a secret"
    reason = instruction_refusal(text)
    if reason:
        return reason
    words = _words_form(text)
    reason = _first(_CREDENTIAL_MENTION, words) or _served_only_refusal(words) or _near_credential(words)
    if reason:
        return reason
    reason = network_refusal(text, known)
    if reason:
        return reason
    reason = _alphabet_refusal(form)
    if reason:
        return reason
    judged, share = english_share(text, known)
    if judged >= MIN_WORDS_JUDGED and share < MIN_ENGLISH_SHARE:
        return f"not English ({share:.0%} of its words are English or known names)"
    if grounded and not names_a_validated_part(original, known):
        return "names no route, table, column, field or error code"
    return None


def _without_endpoint_labels(text: str, known: KnownNames) -> str:
    """``text`` with the validated endpoints it names that hold a ``:`` or a ``.`` (``tool:llm``,
    ``/v1/chat.completions``) replaced by a neutral word: a validated part is not free text, and a
    tool may be named after a model or hold a dot."""
    for route in sorted(known.routes, key=len, reverse=True):
        if (":" in route or "." in route) and route in text:
            text = text.replace(route, "endpoint")
    return text


_ENDPOINT_SHAPE = re.compile(r"(?:/[A-Za-z0-9_{}.\-]+)+/?|/|[a-z][a-z0-9_\-]{0,30}:[A-Za-z0-9_{}\-/.]{1,60}")
_LABEL_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9_\- ]{0,59}")


def _label_words_refusal(label: str) -> str | None:
    """Why the words of a label (camelCase, ``_``, ``-``, ``/``, ``:`` and letter/digit boundaries
    read as separators, leetspeak read as letters) are an instruction, a credential, words to a
    reader or an unknown identifier too long to be a name."""
    separated = re.sub(r"[/:{}\-.]+", " ", label)
    split = re.sub(r"(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])", " ", separated)
    reason = None
    for words in (_words_form(separated), _words_form(split)):
        reason = reason or (
            _first(_INSTRUCTIONS, words)
            or _first(_CREDENTIAL_MENTION, words)
            or _first(_ADDRESSED[1:], words)  # a tool may be named after a model (tool:llm)
            or _first(_CREDENTIAL_ASK, words)
            or _first(_AUTHORITY + _HEADER_VALUES, words)  # "your" may name a tool (get_your_orders)
            or _near_credential(words)
        )
    if reason:
        return f"names an instruction or a credential ({reason})"
    vocabulary = english_words()
    for raw in re.split(r"[^A-Za-z]+", split_words(label)):  # each word of letters
        if len(raw) > MAX_UNKNOWN_IDENTIFIER and raw.lower() not in vocabulary:
            return f"an unknown identifier longer than {MAX_UNKNOWN_IDENTIFIER} characters"
    return None


def identifier_refusal(name: str) -> str | None:
    """Why a name quoted from agent text (a column in an error, a label) may not be shown: its
    words, read through camelCase, separators and leetspeak, are an instruction, name a credential
    or address a reader, or it is an unknown identifier too long to be a name."""
    return _label_words_refusal(name)


def endpoint_refusal(endpoint: str) -> str | None:
    """Why an endpoint (a claim in the lake) may not be named in an entry: it must be a route-shaped
    path (``/tables/{name}``) or a ``kind:name`` label (``runtime:model_call``), at most 100
    characters, whose words are no instruction and name no credential."""
    if len(endpoint) > 100 or not _ENDPOINT_SHAPE.fullmatch(endpoint):
        return "endpoint is not a route or a kind:name label"
    if "//" in endpoint:
        return "endpoint names a host (a URL)"
    # every part strictly: an IP (any digits.digits part not after a letter: 127.1, 10.0.0.1),
    # host:port or a dotted name ending in a top-level domain (evil.tv, evil.com-) is a host;
    # a dotted method name (tool:db.select, /v1/chat.completions) is not
    spaced = " ".join(p for p in re.split(r"[/:{}]+", endpoint) if p)
    if (
        network_refusal(spaced, KnownNames(), tables=False)
        or _IPV4.search(endpoint)
        or re.search(r"(?<![A-Za-z_])\d+\.\d", endpoint)
    ):
        return "endpoint names a host"
    return _label_words_refusal(endpoint)


def served_fields_refusal(endpoint: str, task_class: str | None) -> str | None:
    """Why an entry may not serve these claimed fields (:func:`endpoint_refusal`,
    :func:`label_refusal`), else ``None``."""
    reason = endpoint_refusal(endpoint)
    if reason:
        return f"endpoint: {reason}"
    reason = label_refusal(task_class) if task_class is not None else None
    return f"task_class: {reason}" if reason else None


def label_refusal(label: str) -> str | None:
    """Why a task class (a claim in the lake, served as a field) may not be: it must be a short
    label of letters, digits, ``_``, ``-`` and spaces (``staff_job``) whose words are no
    instruction, name no credential and address no reader."""
    if not _LABEL_SHAPE.fullmatch(label):
        return "not a short label"
    if _first(_ADDRESSED, _words_form(label.replace("-", " "))):
        return "addressed to its reader"
    return _label_words_refusal(label)


def fenced(
    text: str, limit: int, known: KnownNames | None = None, *, grounded: bool = False
) -> tuple[str | None, str | None]:
    """(the text as served — compatibility form, whitespace collapsed, cut to ``limit`` at a word
    boundary — or ``None``, and the refusal reason). Checked first, then shaped."""
    reason = lesson_refusal(text, known, grounded=grounded)
    if reason:
        return None, reason
    return truncate_words(" ".join(compatible(text).split()), limit), None


def truncate_words(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` characters at a word boundary, marking the cut with …."""
    if len(text) <= limit:
        return text
    cut = text[: max(limit - len(ELLIPSIS), 0)]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + ELLIPSIS


# ---- prompts ------------------------------------------------------------------------------------
def mask_locations(text: str) -> str:
    """``text`` with URLs, defanged forms, e-mail addresses and IP addresses replaced by
    :data:`LOCATION` (non-strict: table.column names stay)."""
    out = compatible(text[:MAX_CHECKED_CHARS])
    for pattern in (_URL_SPAN, _DEFANGED_SPAN, _IPV4, _IPV6):
        out = pattern.sub(LOCATION, out)
    return out


_URL_SPAN = re.compile(
    r"(?i)(?<![a-z0-9+.\-])[a-z][a-z0-9+.\-]{0,20}://\S*|\bwww\d?\.\S+|\b(?:mailto|javascript|data):\S+"
    r"|(?<![\w.+-])[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+|\bh[x*]{2}ps?\S*"
)
_DEFANGED_SPAN = re.compile(r"(?i)(?<!\S)\S*?(?:\[\s*(?:\.|dot|:)\s*\]|\(\s*(?:\.|dot)\s*\)|\{\s*\.\s*\})\S*")


def prompt_text(text: str) -> str:
    """Agent text as it may be shown to a model as data: withheld (with the reason) when it reads
    as written to its reader; else with network locations masked."""
    reason = instruction_refusal(text)
    if reason:
        return WITHHELD.format(reason=reason)
    return mask_locations(text)
