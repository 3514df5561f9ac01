"""Who vouches for evidence: independent reporters, from API keys and their trust levels.

The API key is the only identity opslake knows: the server stamps its name on every op as
``reporter_id``. ``agent_id``, ``source`` and ``event_kind`` are what the client says about itself,
stored as claims. Evidence thresholds therefore count *independent reporters* (here: witnesses),
never claimed agents. What one op counts as depends on its key's trust level
(``Settings.reporter_trust``, default ``Settings.reporter_trust_default``):

* ``untrusted``: nothing (its ops are never evidence);
* ``reporter`` (the default): the key is one witness, however many agent_ids it claims;
* ``runtime``: a runtime that hosts many agents; each claimed ``agent_id`` is a witness, up to
  :data:`RUNTIME_MAX_REPORTERS` per key (so one runtime key can never outweigh many keys).

A witness is a string kept on signatures and playbook entries: the key's name (``%`` and ``/``
escaped), and for a runtime key ``name/agent_id``. :meth:`ReporterTrust.count` reads the key back
out of each witness and applies the trust levels *as they are now*, so marking a key untrusted
takes its weight off every entry it vouched for at the next consolidator run.

The scheduled jobs' (and ``POST /ask``'s) own model calls are written under :data:`INTERNAL_REPORTERS` (a server fact,
unlike ``source = 'llm'``): they are never evidence.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from opslake.config import TrustLevel
from opslake.models.analysis import MAX_TRACKED_AGENTS
from opslake.query.sqltext import sql_string_list

if TYPE_CHECKING:
    from opslake.config import Settings

#: A runtime key counts as at most this many independent reporters (one per claimed agent_id).
RUNTIME_MAX_REPORTERS = 5
#: The ``reporter_id`` each scheduled job writes its own model calls under (llm/records.py).
ANALYZER_REPORTER = "opslake-analyzer"
CONSOLIDATOR_REPORTER = "opslake-consolidator"
#: ``POST /ask``'s model calls (made for the caller, whose own call is the gateway record).
ASK_REPORTER = "opslake-ask"
INTERNAL_REPORTERS = frozenset({ANALYZER_REPORTER, CONSOLIDATOR_REPORTER, ASK_REPORTER})


def _escape(name: str) -> str:
    return name.replace("%", "%25").replace("/", "%2F")


def _unescape(name: str) -> str:
    return name.replace("%2F", "/").replace("%25", "%")


def witness_key(witness: str) -> str:
    """The API key name a witness stands for."""
    return _unescape(witness.partition("/")[0])


@dataclass(frozen=True)
class ReporterTrust:
    """Trust levels per API key name; turns (reporter_id, agent_id) pairs into witnesses and counts them."""

    levels: Mapping[str, TrustLevel] = field(default_factory=dict)
    default: TrustLevel = "reporter"
    runtime_cap: int = RUNTIME_MAX_REPORTERS

    @classmethod
    def from_settings(cls, settings: Settings) -> ReporterTrust:
        return cls(levels=dict(settings.reporter_trust), default=settings.reporter_trust_default)

    def level(self, reporter_id: str | None) -> TrustLevel:
        """A key's trust level; an op without a key, or written by opslake itself, is never evidence."""
        if not reporter_id or reporter_id in INTERNAL_REPORTERS:
            return "untrusted"
        return self.levels.get(reporter_id, self.default)

    def counts(self, reporter_id: str | None) -> bool:
        """Whether this key's ops count as evidence at all."""
        return self.level(reporter_id) != "untrusted"

    def witness(self, reporter_id: str | None, agent_id: str) -> str | None:
        """What one op from this key, claiming this agent, counts as (None: nothing)."""
        level = self.level(reporter_id)
        if level == "untrusted" or reporter_id is None:
            return None
        key = _escape(reporter_id)
        return key if level == "reporter" else f"{key}/{agent_id}"

    def count(self, witnesses: Iterable[str]) -> int:
        """Independent reporters among ``witnesses``, under the trust levels as they are now: an
        untrusted key adds nothing, a reporter key one, a runtime key one per distinct agent (at
        least one, at most :attr:`runtime_cap`)."""
        agents: dict[str, set[str]] = {}
        for witness in witnesses:
            key, _, agent = witness.partition("/")
            agents.setdefault(_unescape(key), set()).add(agent)
        total = 0
        for key, claimed in agents.items():
            level = self.level(key)
            if level == "reporter":
                total += 1
            elif level == "runtime":
                total += max(1, min(self.runtime_cap, len(claimed - {""})))
        return total

    def excluded(self) -> list[str]:
        """Key names never counted whatever the default: opslake's own and those marked untrusted.
        With an untrusted default this is *not* every key that does not count (keys nobody named
        do not count either): filter queries with :meth:`sql_predicate`, never with this list."""
        return sorted({*INTERNAL_REPORTERS, *(k for k, v in self.levels.items() if v == "untrusted")})

    def trusted(self) -> list[str]:
        """Key names named with a level that counts (``reporter`` or ``runtime``), opslake's own aside."""
        return sorted(k for k, v in self.levels.items() if v != "untrusted" and k not in INTERNAL_REPORTERS)

    def sql_predicate(self, column: str = "reporter_id") -> str:
        """A SQL condition true exactly for the rows whose key :meth:`counts`: an allowlist
        (``IN`` the named trusted keys) when the default is untrusted, else ``NOT IN``
        :meth:`excluded`. A NULL key matches neither form, as :meth:`counts` says of no key."""
        if self.default == "untrusted":
            return f"{column} IN ({sql_string_list(self.trusted())})"
        return f"{column} NOT IN ({sql_string_list(self.excluded())})"


def cap_witnesses(
    witnesses: Iterable[str], *, per_key: int = RUNTIME_MAX_REPORTERS, total: int = MAX_TRACKED_AGENTS
) -> list[str]:
    """At most ``per_key`` witnesses per API key, then at most ``total`` in all, sorted.

    A runtime key counts at most ``per_key`` agents anyway (:meth:`ReporterTrust.count`), so
    keeping more of its witnesses adds nothing but would push other keys' witnesses out of a
    list capped at ``total``; the cap per key comes first so no key can crowd others out. Each
    key keeps its alphabetically first witnesses, so the result depends only on the set given."""
    per: dict[str, list[str]] = {}
    for witness in sorted(set(witnesses)):
        kept = per.setdefault(witness.partition("/")[0], [])
        if len(kept) < per_key:
            kept.append(witness)
    # Round-robin over keys before the total cap: every key keeps one witness before any keeps two.
    ordered: list[str] = []
    for rank in range(per_key):
        ordered += [kept[rank] for _, kept in sorted(per.items()) if rank < len(kept)]
    return sorted(ordered[:total])


def admits(
    witnesses: Collection[str],
    witness: str,
    *,
    per_key: int = RUNTIME_MAX_REPORTERS,
    total: int = MAX_TRACKED_AGENTS,
) -> bool:
    """Whether a list kept one witness at a time (a signature's reporters) takes ``witness``: new,
    room left in all, and its key below ``per_key`` witnesses (as :func:`cap_witnesses` keeps)."""
    if witness in witnesses or len(witnesses) >= total:
        return False
    key = witness.partition("/")[0]
    return sum(1 for w in witnesses if w.partition("/")[0] == key) < per_key
