"""The causes tables (``<set>/causes.json``) and how a run is scored against them.

A cause is a tool (``*`` for any, ``a|b`` for either) and a regex over the failed call's error
message; the first cause that matches a failed call is its cause, and a failed call that matches
none is ``unclassified``. A cause's ``expect`` says what a lesson must name to state the real fix
or rule: every term of ``all`` and one of ``any``, case-insensitive, in the text of an entry about
the cause's tool (trigger, action, instead-of and fix names) that is tied to failures (an ``avoid``
entry, or one with a signature, an instead-of or fix names): a success pattern that happens to
contain the words does not count.

An entry is **generic** when it names nothing of its tool that the traffic shows: no argument of
that tool (a key at any depth of its calls' arguments, three characters or more), no tool called
before it in a session, and no run of four words from one of its error messages. An entry that
names no tool of the set at all is generic too.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajectories.convert import ToolCall

HERE = Path(__file__).resolve().parent
UNCLASSIFIED = "unclassified"
WORD = re.compile(r"[a-z0-9_]+")
#: Argument keys too common to show that an entry names its tool's arguments.
COMMON_KEYS = frozenset({"type", "text", "name", "content", "the", "and", "for", "with", "data", "value"})


@dataclass(frozen=True)
class Cause:
    id: str
    tools: tuple[str, ...]  # ("*",) for any tool
    match: re.Pattern[str]
    cause: str
    expect_all: tuple[str, ...] = ()
    expect_any: tuple[str, ...] = ()
    actionable: bool = True

    def applies(self, call: ToolCall) -> bool:
        return ("*" in self.tools or call.tool in self.tools) and bool(self.match.search(call.error or ""))

    def named_by(self, text: str) -> bool:
        """Whether a lesson's text names this cause's fix or rule (see the module docstring)."""
        if not self.expect_all and not self.expect_any:
            return False
        lowered = text.lower()
        return all(term.lower() in lowered for term in self.expect_all) and (
            not self.expect_any or any(term.lower() in lowered for term in self.expect_any)
        )


@dataclass(frozen=True)
class CausesTable:
    set: str
    causes: tuple[Cause, ...]

    def assign(self, call: ToolCall) -> str | None:
        """The failed call's cause id (``unclassified`` when none matches); None for a success."""
        if not call.errored:
            return None
        return next((cause.id for cause in self.causes if cause.applies(call)), UNCLASSIFIED)

    def by_id(self) -> dict[str, Cause]:
        return {cause.id: cause for cause in self.causes}


def load_causes(set_name: str, directory: Path = HERE) -> CausesTable:
    document = json.loads((directory / set_name / "causes.json").read_text(encoding="utf-8"))
    causes = tuple(
        Cause(
            id=item["id"],
            tools=tuple(item["tool"].split("|")),
            match=re.compile(item["match"], re.MULTILINE),
            cause=item["cause"],
            expect_all=tuple(item.get("expect", {}).get("all", ())),
            expect_any=tuple(item.get("expect", {}).get("any", ())),
            actionable=bool(item.get("actionable", True)),
        )
        for item in document["causes"]
    )
    return CausesTable(document["set"], causes)


# ---- signatures: per real cause, and each signature's purity ------------------------------------


@dataclass
class SignatureScore:
    signature_id: str
    endpoint: str
    ops: int
    causes: Counter[str]

    @property
    def majority(self) -> str:
        return self.causes.most_common(1)[0][0]

    @property
    def purity(self) -> float:
        """The share of the signature's ops whose cause is its majority cause."""
        return self.causes.most_common(1)[0][1] / self.ops if self.ops else 0.0


def score_signatures(
    assignments: Mapping[str, str | None], op_signatures: Mapping[str, str], endpoints: Mapping[str, str]
) -> list[SignatureScore]:
    """``assignments``: op id → cause id; ``op_signatures``: failed op id → signature id."""
    grouped: dict[str, Counter[str]] = defaultdict(Counter)
    for op_id, signature_id in op_signatures.items():
        cause = assignments.get(op_id)
        if cause is not None:
            grouped[signature_id][cause] += 1
    return sorted(
        (
            SignatureScore(sid, endpoints.get(sid, "?"), sum(counts.values()), counts)
            for sid, counts in grouped.items()
        ),
        key=lambda score: (-score.ops, score.signature_id),
    )


def weighted_purity(scores: Sequence[SignatureScore]) -> float:
    ops = sum(score.ops for score in scores)
    return sum(score.purity * score.ops for score in scores) / ops if ops else 1.0


# ---- entries: naming the real fix, or generic ----------------------------------------------------


@dataclass
class ToolVocabulary:
    """What the traffic shows of each tool: argument keys, the tools called before it, its errors."""

    arguments: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    preceding: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    error_runs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    @classmethod
    def of(cls, calls: Iterable[ToolCall]) -> ToolVocabulary:
        vocabulary = cls()
        seen: dict[str, list[str]] = defaultdict(list)
        for call in calls:
            vocabulary.arguments[call.tool].update(_keys(call.arguments))
            vocabulary.preceding[call.tool].update(t for t in seen[call.session] if t != call.tool)
            seen[call.session].append(call.tool)
            if call.error:
                words = WORD.findall(call.error.lower())
                vocabulary.error_runs[call.tool].update(
                    " ".join(words[i : i + 4]) for i in range(max(0, len(words) - 3))
                )
        return vocabulary

    def tools(self) -> set[str]:
        return set(self.arguments)

    def names_something(self, tool: str, text: str) -> bool:
        lowered = text.lower()
        words = WORD.findall(lowered)
        if any(
            key in words for key in self.arguments.get(tool, ()) if len(key) >= 3 and key not in COMMON_KEYS
        ):
            return True
        if any(other.lower() in lowered for other in self.preceding.get(tool, ())):
            return True
        runs = {" ".join(words[i : i + 4]) for i in range(max(0, len(words) - 3))}
        return bool(runs & self.error_runs.get(tool, set()))


def _keys(arguments: str) -> set[str]:
    try:
        value: Any = json.loads(arguments)
    except ValueError:
        return set()
    keys: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            keys.update(str(key).lower() for key in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return keys


def entry_text(entry: Mapping[str, Any]) -> str:
    names = entry.get("fix_names")
    parts = [entry.get("trigger"), entry.get("action"), entry.get("instead_of")]
    if isinstance(names, list | tuple):
        parts.extend(str(name) for name in names)
    return " ".join(str(part) for part in parts if part)


def failure_linked(entry: Mapping[str, Any]) -> bool:
    """Whether an entry is about failures: an ``avoid`` entry, or one with a signature, an
    instead-of or fix names."""
    names = entry.get("fix_names")
    has_names = names is not None and len(names) > 0
    return bool(
        entry.get("kind") == "avoid" or entry.get("signature_id") or entry.get("instead_of") or has_names
    )


def entry_tool(entry: Mapping[str, Any], tools: Iterable[str]) -> str | None:
    """The tool an entry is about: its endpoint ``tool:<name>``, else the longest tool name its
    text mentions."""
    endpoint = str(entry.get("endpoint") or "")
    if endpoint.startswith("tool:"):
        return endpoint.removeprefix("tool:")
    text = entry_text(entry).lower()
    mentioned = [tool for tool in tools if tool.lower() in text]
    return max(mentioned, key=len) if mentioned else None


@dataclass
class EntryScore:
    entry_id: str
    status: str
    tool: str | None
    names: list[str]  # the causes whose fix or rule the entry names
    generic: bool
    text: str


def score_entries(
    entries: Iterable[Mapping[str, Any]], table: CausesTable, vocabulary: ToolVocabulary
) -> list[EntryScore]:
    tools = vocabulary.tools()
    scores = []
    for entry in entries:
        text = entry_text(entry)
        tool = entry_tool(entry, tools)
        names = [
            cause.id
            for cause in table.causes
            if tool is not None
            and failure_linked(entry)
            and ("*" in cause.tools or tool in cause.tools)
            and cause.named_by(text)
        ]
        generic = tool is None or not vocabulary.names_something(tool, text)
        scores.append(
            EntryScore(str(entry.get("entry_id")), str(entry.get("status")), tool, names, generic, text)
        )
    return scores
