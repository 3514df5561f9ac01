"""Build corpus.jsonl, the secret shapes the redaction tests plant, from gitleaks' rule set (as data).

gitleaks (https://github.com/gitleaks/gitleaks, MIT licence, Copyright (c) 2019 Zachary Rice) keeps
one regex per secret kind in config/gitleaks.toml and true-positive examples (``tps``) beside each
rule in cmd/generate/config/rules/*.go. Most of those examples are random at gitleaks' test time,
so this script takes, for every rule:

* the literal examples written in the rule's .go file (origin ``tps``), and
* one sample generated from the rule's regex with a seeded generator (origin ``generated``), so
  the committed corpus is the same on every run.

Each sample is checked against the rule's regex (translated from Go's RE2 dialect to Python's)
and the secret is the rule's secret group. ``kind`` says whether gitleaks itself would flag the
secret standing alone (``shape``: the rule's keyword gate opens on the secret and its regex
matches it, e.g. ``sk_live_…``, ``npm_…``) or only next to its provider's name (``context``: e.g.
32 hex characters after "adafruit"); the tests plant each accordingly.

It also writes layers/common/opslake/ingest/provider_rules.py: the same rules as Python data for
the redactor (keywords that gate each rule, the regex with its context prefix and boundary
suffix relaxed, so a token inside an id or after ``_`` is found too, and the entropy floor).

Run (needs a local clone of gitleaks; the tests need only the committed files)::

    python tests/data/secrets/extract.py /path/to/gitleaks.git [commit]
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import tomllib
import zlib
from pathlib import Path
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "corpus.jsonl"
RULES_OUT = HERE.parents[2] / "layers/common/opslake/ingest/provider_rules.py"
REPO = "gitleaks/gitleaks"
LICENSE = "MIT (Copyright (c) 2019 Zachary Rice); samples are test data, used with attribution"
MAX_PER_RULE_LITERALS = 2
# Rules that describe files or whole documents rather than a secret value in text.
SKIP = {"pkcs12-file", "kubernetes-secret-yaml"}
# Not run by the redactor: its own key=value logic replaces gitleaks' generic rule, its header
# logic the curl rules (whose ``.*?`` spans lines and backtracks), and the rest describe files.
RUNTIME_SKIP = SKIP | {"generic-api-key", "curl-auth-header", "curl-auth-user"}
_SUFFIX = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
_CONTEXT_PREFIX = r"[\w.-]{0,50}?"
_PRINTABLE = [chr(c) for c in range(0x21, 0x7F)]


def git_show(repo: Path, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), "show", f"{commit}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def to_python_regex(go: str) -> str:
    """Go RE2 to Python ``re``: a ``(?i)`` flag inside a group becomes a scoped ``(?i:...)``."""
    go = go.replace(r"\z", r"\Z").replace("[[:alnum:]]", "[A-Za-z0-9]")
    out = go
    start = 1  # a leading (?i) is global in both dialects
    while True:
        at = out.find("(?i)", start)
        if at < 0:
            break
        depth, i, in_class = 0, at + 4, False
        while i < len(out):
            ch = out[i]
            if ch == "\\":
                i += 2
                continue
            if in_class:
                in_class = ch != "]"
            elif ch == "[":
                in_class = True
                if out[i + 1 : i + 2] == "]":
                    i += 1
            elif ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    break
                depth -= 1
            i += 1
        out = out[:at] + "(?i:" + out[at + 4 : i] + ")" + out[i:]
        start = at + 4
    return out


class _Sampler:
    """Draws one ASCII string from a parsed regex (lookarounds and anchors are skipped)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def draw(self, parsed: Any) -> str:
        return "".join(self._node(op, av) for op, av in parsed)

    def _class(self, items: Any) -> list[str]:
        chars: set[str] = set()
        negate = False
        for op, av in items:
            name = str(op)
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                chars.add(chr(av))
            elif name == "RANGE":
                chars.update(chr(c) for c in range(av[0], av[1] + 1) if c < 0x7F)
            elif name == "CATEGORY":
                chars.update(self._category(str(av)))
        if negate:
            return [c for c in _PRINTABLE if c not in chars] or ["x"]
        return sorted(chars) or ["x"]

    @staticmethod
    def _category(name: str) -> list[str]:
        digits = [chr(c) for c in range(0x30, 0x3A)]
        word = digits + [chr(c) for c in range(0x41, 0x5B)] + [chr(c) for c in range(0x61, 0x7B)] + ["_"]
        table = {
            "CATEGORY_DIGIT": digits,
            "CATEGORY_NOT_DIGIT": [c for c in _PRINTABLE if c not in digits],
            "CATEGORY_WORD": word,
            "CATEGORY_NOT_WORD": [c for c in _PRINTABLE if c not in word],
            "CATEGORY_SPACE": [" "],
            "CATEGORY_NOT_SPACE": _PRINTABLE,
        }
        return table.get(name, ["x"])

    def _node(self, op: Any, av: Any) -> str:
        name = str(op)
        if name == "LITERAL":
            return chr(av)
        if name == "NOT_LITERAL":
            return self.rng.choice([c for c in _PRINTABLE if ord(c) != av])
        if name == "ANY":
            return self.rng.choice([c for c in _PRINTABLE if c.isalnum()])
        if name == "IN":
            return self.rng.choice(self._class(av))
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = av
            high = min(high, low + 12) if high != sre_parse.MAXREPEAT else low + 12
            # Fixed-length secrets keep their length; optional decoration stays short.
            count = (
                low
                if low == high
                else self.rng.randint(low, max(low, min(high, low + 3 if low == 0 else high)))
            )
            return "".join(self.draw(sub) for _ in range(count))
        if name == "SUBPATTERN":
            return self.draw(av[-1])
        if name == "BRANCH":
            return self.draw(self.rng.choice(av[1]))
        if name in ("ATOMIC_GROUP",):
            return self.draw(av)
        return ""  # AT, ASSERT, ASSERT_NOT, GROUPREF: nothing to draw


def kind_of(record: dict[str, Any], config: dict[str, Any]) -> str:
    """``shape`` when gitleaks would flag the secret standing alone (its rule's keyword gate opens
    on the secret and the regex matches it), else ``context`` (it needs its provider's name)."""
    rule = next(r for r in config["rules"] if r["id"] == record["rule"])
    secret = record["secret"]
    keywords = [k.lower() for k in rule.get("keywords") or []]
    gated = any(k in secret.lower() for k in keywords)
    return "shape" if gated and re.search(to_python_regex(rule["regex"]), secret) else "context"


def secret_of(match: re.Match[str], group: int | None) -> str:
    if group:
        return match.group(group) or ""
    for value in match.groups():
        if value:
            return value
    return match.group(0)


def go_literals(source: str) -> list[str]:
    """The string literals of a rule file's ``tps`` lists (raw `...` and interpreted "...")."""
    found: list[str] = []
    for block in re.finditer(r"tps\s*(?::=|=)(.*?)(?=\n\s*fps\s*(?::=|=)|\n\s*return\s)", source, re.S):
        for literal in re.finditer(r'`([^`]*)`|"((?:[^"\\\n]|\\.)*)"', block.group(1)):
            if literal.group(1) is not None:
                found.append(literal.group(1))
            else:
                try:
                    found.append(json.loads('"' + literal.group(2) + '"'))
                except ValueError:
                    continue
    return found


def build(repo: Path, commit: str) -> list[dict[str, Any]]:
    config = tomllib.loads(git_show(repo, commit, "config/gitleaks.toml"))
    files = subprocess.run(
        ["git", "--git-dir", str(repo), "ls-tree", "--name-only", commit, "cmd/generate/config/rules/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    literals_by_rule: dict[str, list[tuple[str, str]]] = {}
    sources = {path: git_show(repo, commit, path) for path in files if path.endswith(".go")}
    for path, source in sources.items():
        for rule_id in re.findall(r'RuleID:\s*"([^"]+)"', source):
            literals_by_rule.setdefault(rule_id, []).extend((path, lit) for lit in go_literals(source))
    records: list[dict[str, Any]] = []
    for rule in config["rules"]:
        rule_id, go_regex = rule["id"], rule.get("regex")
        if not go_regex or rule_id in SKIP:
            continue
        pattern = re.compile(to_python_regex(go_regex))
        keywords = [k.lower() for k in rule.get("keywords") or []]
        keyword = (keywords or [""])[0]
        base = {"rule": rule_id, "keyword": keyword, "regex": go_regex}
        rule_path = next((p for p, s in sources.items() if f'"{rule_id}"' in s), None)
        taken = 0
        for path, literal in literals_by_rule.get(rule_id, []):
            match = pattern.search(literal)
            if not match or taken >= MAX_PER_RULE_LITERALS:
                continue
            secret = secret_of(match, rule.get("secretGroup"))
            if len(secret) < 8:
                continue
            records.append({**base, "origin": "tps", "path": path, "sample": literal, "secret": secret})
            taken += 1
        parsed = sre_parse.parse(pattern.pattern)
        for attempt in range(200):
            sample = _Sampler(zlib.crc32(f"{rule_id}:{attempt}".encode())).draw(parsed)
            match = pattern.search(sample)
            if match and len(secret_of(match, rule.get("secretGroup"))) >= 8:
                records.append(
                    {
                        **base,
                        "origin": "generated",
                        "path": "config/gitleaks.toml",
                        "rule_path": rule_path,
                        "sample": sample,
                        "secret": secret_of(match, rule.get("secretGroup")),
                    }
                )
                break
        else:
            print(f"no sample for {rule_id}", file=sys.stderr)
    for record in records:
        record.update({"repo": REPO, "commit": commit, "license": LICENSE})
        record["kind"] = kind_of(record, config)
    return records


def runtime_regex(go: str) -> str:
    """The rule as the redactor runs it: no leading identifier run (only the secret is replaced,
    and a lazy ``[\\w.-]{0,50}?`` at every position costs 50 steps a character), and alphanumeric
    boundaries instead of ``\\b`` and the delimiter suffix, so ``agent_sk_live_...`` and
    ``.../hf_...?x=1`` are found."""
    if go.startswith("(?i)" + _CONTEXT_PREFIX):
        go = "(?i)" + go[len("(?i)" + _CONTEXT_PREFIX) :]
    elif go.startswith(_CONTEXT_PREFIX):
        go = go[len(_CONTEXT_PREFIX) :]
    if go.startswith("(?i:" + _CONTEXT_PREFIX):  # a second run inside a case-insensitive group
        go = "(?i:" + go[len("(?i:" + _CONTEXT_PREFIX) :]
    if go.endswith(_SUFFIX):
        go = go[: -len(_SUFFIX)] + "(?![A-Za-z0-9])"
    go = go.replace(r"\b(", r"(?<![A-Za-z0-9])(", 1) if r"\b(" in go[:12] else go
    return to_python_regex(go)


def _prefixes(items: list[Any], n: int, acc: set[str]) -> set[str]:
    """The strings (lowercased, up to ``n`` characters) a match of ``items`` can begin with; a
    string shorter than ``n`` means what follows it is not a short list of literals."""
    for i, (op, av) in enumerate(items):
        if all(len(a) >= n for a in acc):
            break
        name = str(op)
        if name == "LITERAL":
            acc = {a + chr(av).lower() for a in acc}
        elif name == "IN":
            chars: set[str] = set()
            for item_op, item in av:
                if str(item_op) == "LITERAL":
                    chars.add(chr(item).lower())
                elif str(item_op) == "RANGE" and item[1] - item[0] < 8:
                    chars.update(chr(c).lower() for c in range(item[0], item[1] + 1))
                else:
                    return acc
            if len(chars) * len(acc) > 256:
                return acc
            acc = {a + c for a in acc for c in chars}
        elif name == "SUBPATTERN":
            return _prefixes([*av[3], *items[i + 1 :]], n, acc)
        elif name == "BRANCH":
            return {p for alt in av[1] for p in _prefixes([*alt, *items[i + 1 :]], n, acc)}
        elif name == "AT" or (name in ("ASSERT", "ASSERT_NOT") and av[0] == -1):
            continue  # zero-width: a boundary or a lookbehind
        else:
            break
    return acc


def anchoring(pattern: str, keywords: tuple[str, ...], samples: list[str]) -> tuple[str, int]:
    """How the redactor finds a rule's matches from where its keywords are, so that work does not
    grow with the number of rules a text's keywords open: ``start`` when every match begins with a
    keyword (proved from the regex: tried at each keyword), ``near`` when every match holds one
    and is at most ``width`` characters long (tried in a window around each keyword; checked on
    gitleaks' examples and 100 strings drawn from the regex), else ``scan`` (the whole text)."""
    parsed = sre_parse.parse(pattern)
    width = parsed.getwidth()[1]
    starts = _prefixes(list(parsed), max(map(len, keywords)), {""})
    if all(any(p.startswith(k) for k in keywords) for p in starts):
        return "start", 0
    if width >= sre_parse.MAXREPEAT:
        return "scan", 0
    compiled = re.compile(pattern)
    drawn = [_Sampler(seed).draw(parsed) for seed in range(100)]
    matches = [m.group(0).lower() for text in [*samples, *drawn] for m in compiled.finditer(text)]
    if matches and all(any(k in m for k in keywords) for m in matches):
        return "near", width
    return "scan", 0


def write_rules(config: dict[str, Any], commit: str, records: list[dict[str, Any]]) -> int:
    """provider_rules.py: (rule id, keywords, regex, secret group, entropy floor, how it is found,
    longest match) per rule."""
    lines = [
        '"""Secret shapes from gitleaks\' rule set, as data for :mod:`opslake.ingest.redact`.',
        "",
        f"Generated by tests/data/secrets/extract.py from {REPO}@{commit} config/gitleaks.toml;",
        "do not edit by hand. gitleaks is MIT-licensed, Copyright (c) 2019 Zachary Rice. Each rule runs",
        "only when one of its keywords occurs in the lowercased text (gitleaks' own gate), and only its",
        "secret group is replaced.",
        '"""',
        "",
        "# ruff: noqa: E501  (gitleaks' regexes are long)",
        "",
        "# (rule id, keywords, regex, secret group (0: first non-empty group), minimum Shannon entropy,",
        '# how matches are found from the keywords\' positions, longest match for "near"):',
        '# "start": every match begins with a keyword; "near": every match holds one; "scan": neither.',
        "RULES: tuple[tuple[str, tuple[str, ...], str, int, float, str, int], ...] = (",
    ]
    count = 0
    for rule in config["rules"]:
        if not rule.get("regex") or rule["id"] in RUNTIME_SKIP:
            continue
        pattern = re.compile(runtime_regex(rule["regex"]))
        group = int(rule.get("secretGroup") or 0)
        for record in records:
            if record["rule"] == rule["id"] and not pattern.search(record["sample"]):
                raise SystemExit(f"{rule['id']}: the runtime regex misses {record['sample']!r}")
        keywords = tuple(k.lower() for k in rule.get("keywords") or ())
        samples = [record["sample"] for record in records if record["rule"] == rule["id"]]
        mode, width = anchoring(pattern.pattern, keywords, samples)
        lines.append(
            f"    ({rule['id']!r}, {keywords!r}, {pattern.pattern!r}, {group}, "
            f"{float(rule.get('entropy') or 0)}, {mode!r}, {width}),"
        )
        count += 1
    lines.append(")")
    RULES_OUT.write_text("\n".join(lines) + "\n")
    # The project's formatter, so a regenerated file differs only where the rules did.
    subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet", str(RULES_OUT)], check=False)
    return count


def main() -> None:
    repo = Path(sys.argv[1])
    commit = (
        sys.argv[2]
        if len(sys.argv) > 2
        else subprocess.run(
            ["git", "--git-dir", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    records = build(repo, commit)
    config = tomllib.loads(git_show(repo, commit, "config/gitleaks.toml"))
    print(f"{write_rules(config, commit, records)} rules -> {RULES_OUT}")
    with OUT.open("w") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    kinds = {k: sum(r["kind"] == k for r in records) for k in ("shape", "context")}
    print(f"{len(records)} samples from {len({r['rule'] for r in records})} rules ({kinds}) -> {OUT}")


if __name__ == "__main__":
    main()
