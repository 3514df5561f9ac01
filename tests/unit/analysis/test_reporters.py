"""Who vouches for evidence (issue 12): evidence counts independent reporters (API keys by trust
level), never the agent_ids a client claims; entries with too few reporters wait for approval."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from opslake.analysis.playbooks import (
    DistilledCandidate,
    LogRow,
    SuccessRow,
    approve,
    candidate_groups,
    distill,
    merge_candidates,
    review,
    snapshot,
)
from opslake.analysis.reporters import (
    INTERNAL_REPORTERS,
    RUNTIME_MAX_REPORTERS,
    ReporterTrust,
    cap_witnesses,
    witness_key,
)
from opslake.analysis.signatures import SignatureIndex
from opslake.config import load_settings
from opslake.errors import ConfigurationError
from opslake.models.analysis import Diagnosis, FailureSample
from opslake.models.playbooks import PlaybookEntry, PlaybookSnapshot
from tests.vocabulary import staffing_vocabulary

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)
# Any text would do: the point is how many independent reporters vouch for it, not what it says.
FORGED = 'POST /sql {"sql":"SELECT name, hourly_rate FROM workers ORDER BY hourly_rate DESC LIMIT 5"}'


def op(i: int, *, key: str, agent: str, text: str = FORGED) -> SuccessRow:
    return SuccessRow(
        op_id=f"op-{key}-{i}", endpoint="/sql", agent_id=agent, reporter_id=key,
        ts=T0 + timedelta(minutes=i), task_class="sql_question", input_summary=text, source="event",
    )  # fmt: skip


def forged(key: str = "mallory", n: int = 4) -> list[SuccessRow]:
    """One API key posting ``n`` successful ops, each claiming another agent_id (the issue's repro)."""
    return [op(i, key=key, agent=f"agent-{i}") for i in range(n)]


def entries_from(
    rows: list[SuccessRow],
    trust: ReporterTrust | None = None,
    *,
    approval_mode: bool = False,
    min_reporters: int = 2,
) -> list[PlaybookEntry]:
    groups = candidate_groups(rows, [], trust=trust)
    candidates = [DistilledCandidate(g, *distill(g)) for g in groups]
    merged = merge_candidates(
        [], candidates, now=NOW, trust=trust, approval_mode=approval_mode, min_reporters=min_reporters
    )
    return merged.entries


# ---- trust levels -------------------------------------------------------------------------------
def test_a_reporter_key_is_one_witness_however_many_agents_it_claims() -> None:
    trust = ReporterTrust()
    witnesses = {trust.witness("mallory", f"agent-{i}") or "" for i in range(4)}
    assert witnesses == {"mallory"} and trust.count(witnesses) == 1
    assert trust.count(["alice", "bob", "alice"]) == 2


def test_a_runtime_key_counts_its_agents_up_to_a_cap() -> None:
    trust = ReporterTrust(levels={"fleet": "runtime"})
    witnesses = [trust.witness("fleet", f"agent-{i}") for i in range(RUNTIME_MAX_REPORTERS + 5)]
    assert all(w and w.startswith("fleet/") for w in witnesses)
    assert trust.count(w for w in witnesses if w) == RUNTIME_MAX_REPORTERS
    assert trust.count([trust.witness("fleet", "agent-0") or ""]) == 1


def test_untrusted_keys_and_opslake_itself_are_never_witnesses() -> None:
    trust = ReporterTrust(levels={"scraper": "untrusted"})
    assert trust.witness("scraper", "a") is None and not trust.counts("scraper")
    for internal in INTERNAL_REPORTERS:
        assert trust.witness(internal, "a") is None
    assert trust.witness(None, "a") is None  # no key, no identity
    assert trust.excluded() == sorted({*INTERNAL_REPORTERS, "scraper"})
    # an allowlist deployment: unnamed keys count for nothing
    allow = ReporterTrust(levels={"alice": "reporter"}, default="untrusted")
    assert allow.counts("alice") and not allow.counts("bob")


def test_counts_follow_the_trust_levels_as_they_are_now() -> None:
    witnesses = [ReporterTrust().witness(k, "x") or "" for k in ("alice", "bob")]
    assert ReporterTrust().count(witnesses) == 2
    assert ReporterTrust(levels={"bob": "untrusted"}).count(witnesses) == 1
    # a runtime key downgraded to reporter counts once, whatever agents it named before
    runtime = [ReporterTrust(levels={"rt": "runtime"}).witness("rt", f"a{i}") or "" for i in range(3)]
    assert ReporterTrust().count(runtime) == 1


def test_key_names_with_slashes_are_escaped_in_witnesses() -> None:
    trust = ReporterTrust(levels={"team/a": "runtime"})
    witness = trust.witness("team/a", "agent/1")
    assert witness is not None and witness_key(witness) == "team/a"
    assert trust.count([witness, trust.witness("team/a", "agent/2") or ""]) == 2
    assert witness_key(ReporterTrust().witness("50%/b", "x") or "") == "50%/b"


def test_settings_read_trust_levels_as_json() -> None:
    settings = load_settings(
        {
            "OPSLAKE_REPORTER_TRUST": '{"fleet": "runtime", "scraper": "untrusted"}',
            "OPSLAKE_REPORTER_TRUST_DEFAULT": "reporter",
            "OPSLAKE_PLAYBOOK_MIN_REPORTERS": "3",
        }
    )
    assert settings.reporter_trust == {"fleet": "runtime", "scraper": "untrusted"}
    assert settings.playbook_min_reporters == 3
    trust = ReporterTrust.from_settings(settings)
    assert (trust.level("fleet"), trust.level("scraper"), trust.level("other")) == (
        "runtime",
        "untrusted",
        "reporter",
    )
    assert load_settings({}).reporter_trust == {} and load_settings({}).playbook_min_reporters == 2
    for bad in ("{not json", '{"fleet": "admin"}'):
        with pytest.raises(ConfigurationError, match="OPSLAKE_REPORTER_TRUST"):
            load_settings({"OPSLAKE_REPORTER_TRUST": bad})


# ---- the forged consensus -----------------------------------------------------------------------
def test_one_key_claiming_four_agents_is_one_reporter_and_waits_for_approval() -> None:
    """The issue's reproduction: 4 successes, 4 claimed agent_ids, one key. Before: an active entry
    at confidence 0.78 from "4 agents". Now: at most a proposed entry, never served."""
    (group,) = candidate_groups(forged(), [])
    assert (group.agent_count, group.reporter_count, group.reporters) == (4, 1, ("mallory",))
    (entry,) = entries_from(forged())
    assert entry.status == "proposed" and entry.published_at is None
    assert (entry.evidence_reporter_count, entry.evidence_reporters) == (1, ["mallory"])
    assert entry.confidence < 0.78  # confidence grows with reporters, not with claimed agents
    assert snapshot([entry], NOW).entries == []


def test_two_keys_are_two_reporters_and_publish() -> None:
    rows = [*forged("mallory", 2), *[op(i, key="trent", agent=f"agent-{i}") for i in range(2, 4)]]
    (entry,) = entries_from(rows)
    assert entry.status == "active" and entry.evidence_reporter_count == 2
    assert entry.evidence_reporters == ["mallory", "trent"]
    assert [e.entry_id for e in snapshot([entry], NOW).entries] == [entry.entry_id]


def test_a_runtime_key_counts_its_agents_as_reporters() -> None:
    (entry,) = entries_from(forged("fleet"), ReporterTrust(levels={"fleet": "runtime"}))
    assert entry.status == "active" and entry.evidence_reporter_count == 4


def test_an_untrusted_key_is_no_evidence_at_all() -> None:
    trust = ReporterTrust(levels={"mallory": "untrusted"})
    assert candidate_groups(forged(n=10), [], trust=trust) == []
    honest = [op(i, key=f"key-{i}", agent=f"a{i}") for i in range(2)]
    (group,) = candidate_groups([*forged(n=10), *honest], [], trust=trust, min_successes=2)
    assert (group.count, group.reporter_count) == (2, 2)  # mallory's ten ops add nothing


def test_min_reporters_is_the_bar_and_approval_mode_still_holds_everything() -> None:
    rows = [op(i, key=f"key-{i}", agent=f"a{i}") for i in range(3)]
    assert entries_from(rows, min_reporters=3)[0].status == "active"
    assert entries_from(rows, min_reporters=4)[0].status == "proposed"
    assert entries_from(rows, approval_mode=True)[0].status == "proposed"


def test_log_lessons_count_reporters_and_rank_approaches_by_them() -> None:
    def log(i: int, key: str, agent: str, approach: str) -> LogRow:
        return LogRow(
            op_id=f"l-{key}-{i}", endpoint="/match", agent_id=agent, reporter_id=key, ts=T0, success=True,
            task_class="staffing_fill", operation="fill a shift", result="lesson", input_summary=approach,
        )  # fmt: skip

    # mallory names five agents for her approach; two independent keys report another one
    logs = [log(i, "mallory", f"m{i}", "skip the city filter") for i in range(5)]
    logs += [
        log(0, "alice", "alice", "match on city and state"),
        log(0, "bob", "bob", "match on city and state"),
    ]
    (group,) = candidate_groups([], logs)
    assert (group.agent_count, group.reporter_count) == (7, 3)
    assert group.approaches == ("match on city and state", "skip the city filter")
    (only_mallory,) = candidate_groups([], logs[:5])
    assert only_mallory.reporter_count == 1


def test_avoid_diagnoses_need_a_trusted_reporter() -> None:
    def diagnosis(**fields: object) -> Diagnosis:
        return Diagnosis.model_validate(
            {
                "diagnosis_id": "dg-1",
                "signature_id": "sig_0123456789abcdef",
                "endpoint": "/sql",
                "template": "/sql | sql_failed | Column <str> cannot be resolved",
                "cause": "guessed columns",
                "agent_adjustment": "Describe the table first with GET /tables/{name}.",  # specific (issue 16 gate)
                "avoid": True,
                "category": "unknown_column",
                "confidence": 0.8,
                "diagnosed_by": "heuristic",
                "failure_count": 9,
                "agent_count": 4,
                "evidence_op_ids": ["f1"],
                "created_at": T0,
                **fields,
            }
        )

    # every failure came from untrusted keys: no reporter, no candidate
    assert candidate_groups([], [], [diagnosis(reporter_count=0, reporters=[])]) == []
    (one,) = candidate_groups([], [], [diagnosis(reporter_count=1, reporters=["mallory"])])
    assert one.reporter_count == 1
    (two,) = candidate_groups([], [], [diagnosis(reporter_count=2, reporters=["alice", "bob"])])
    assert two.reporter_count == 2
    # a key marked untrusted after the diagnosis no longer counts
    trust = ReporterTrust(levels={"bob": "untrusted"})
    (after,) = candidate_groups(
        [], [], [diagnosis(reporter_count=2, reporters=["alice", "bob"])], trust=trust
    )
    assert after.reporter_count == 1
    # made before reporters were counted: a candidate, but it cannot publish itself
    (legacy,) = candidate_groups([], [], [diagnosis()])
    assert legacy.reporter_count == 0
    staffing = staffing_vocabulary()  # GET /tables/{name} is a route the traffic knows
    drafted = DistilledCandidate(legacy, *distill(legacy, vocabulary=staffing))
    (entry,) = merge_candidates([], [drafted], now=NOW, vocabulary=staffing).entries
    assert entry.status == "proposed"


# ---- review and approval ------------------------------------------------------------------------
def test_review_withholds_entries_whose_reporters_are_no_longer_enough() -> None:
    rows = [*forged("mallory", 2), *[op(i, key="trent", agent=f"agent-{i}") for i in range(2, 4)]]
    (entry,) = entries_from(rows)
    assert entry.status == "active"
    # the operator marks mallory untrusted: one reporter left, the entry goes back to proposed
    result = review(
        [entry],
        trust=ReporterTrust(levels={"mallory": "untrusted"}),
        min_reporters=2,
        approval_mode=False,
        now=NOW,
    )
    (withheld,) = result.entries
    assert result.withheld == [entry.entry_id] and withheld.status == "proposed"
    assert withheld.evidence_reporter_count == 1 and withheld.published_at is None
    # an entry published before reporters were counted (none recorded) is withheld too
    legacy = entry.model_copy(update={"evidence_reporters": [], "evidence_reporter_count": 0})
    assert review([legacy], trust=ReporterTrust(), min_reporters=2, approval_mode=False, now=NOW).withheld


def test_review_publishes_a_proposed_entry_once_enough_reporters_vouch() -> None:
    (entry,) = entries_from(forged("mallory"))
    more = [op(i, key="trent", agent=f"agent-{i}") for i in range(4)]
    groups = candidate_groups(more, [])
    merged = merge_candidates([entry], [DistilledCandidate(g, *distill(g)) for g in groups], now=NOW)
    (updated,) = merged.entries
    assert updated.status == "proposed" and updated.evidence_reporter_count == 2
    result = review(merged.entries, trust=ReporterTrust(), min_reporters=2, approval_mode=False, now=NOW)
    assert result.published == [entry.entry_id] and result.entries[0].status == "active"
    assert result.entries[0].published_at == NOW
    held = review(merged.entries, trust=ReporterTrust(), min_reporters=2, approval_mode=True, now=NOW)
    assert held.published == [] and held.entries[0].status == "proposed"


def test_an_approved_entry_is_served_whatever_its_reporters() -> None:
    (entry,) = entries_from(forged("mallory"))
    (approved,) = approve([entry], entry.entry_id, NOW)
    assert (approved.status, approved.approved_at, approved.published_at) == ("active", NOW, NOW)
    result = review([approved], trust=ReporterTrust(), min_reporters=2, approval_mode=False, now=NOW)
    assert result.withheld == [] and result.entries == [approved]
    assert [e.entry_id for e in snapshot(result.entries, NOW).entries] == [entry.entry_id]


# ---- the analyzer's signatures ------------------------------------------------------------------
def failure(i: int, *, key: str | None, agent: str) -> FailureSample:
    return FailureSample(
        op_id=f"f{i}", endpoint="/sql", agent_id=agent, reporter_id=key, ts=T0, ingested_at=T0,
        error="Column 'x' cannot be resolved", error_type="sql_failed",
    )  # fmt: skip


def test_signatures_count_reporters_beside_claimed_agents() -> None:
    index = SignatureIndex(trust=ReporterTrust(levels={"scraper": "untrusted"}))
    rows = index.apply(
        [
            *(failure(i, key="mallory", agent=f"m{i}") for i in range(4)),
            failure(4, key="alice", agent="alice"),
            failure(5, key="scraper", agent="s"),
            failure(6, key=None, agent="old-sample"),
        ]
    )
    sig = index.signatures[rows[0].signature_id]
    assert (sig.count, sig.agent_count, sig.reporter_count) == (7, 7, 2)
    assert sig.reporters == ["mallory", "alice"]


def test_get_playbooks_never_serves_a_proposed_entry_even_if_a_snapshot_holds_one() -> None:
    """GET /playbooks serves ``PlaybookSnapshot.select``: active entries only, whatever the object holds."""
    (proposed,) = entries_from(forged("mallory"))
    active = proposed.model_copy(update={"entry_id": "pb_active", "status": "active", "published_at": NOW})
    document = PlaybookSnapshot(generated_at=NOW, entries=[proposed, active])
    assert [e.entry_id for e in document.select(endpoint="/sql")] == ["pb_active"]


def test_one_entry_by_id_is_served_only_while_active() -> None:
    """GET /playbooks?entry_id= (an MCP resources/read): the entry when active, nothing when it is
    proposed, and the id filter applies before the limit."""
    (proposed,) = entries_from(forged("mallory"))
    active = [
        proposed.model_copy(update={"entry_id": f"pb_{i}", "status": "active", "published_at": NOW})
        for i in range(3)
    ]
    document = PlaybookSnapshot(generated_at=NOW, entries=[proposed, *active])
    assert [e.entry_id for e in document.select(entry_id="pb_2", limit=1)] == ["pb_2"]
    assert document.select(entry_id=proposed.entry_id) == []
    assert document.select(entry_id="pb_nope") == []


def test_an_untrusted_default_filters_queries_to_the_named_trusted_keys() -> None:
    """Allowlist mode (issue 12): a key nobody named must not count in SQL either, where rows that
    are grouped lose their reporter_id and Python can no longer filter them."""
    allow = ReporterTrust(
        levels={"ops-team": "reporter", "fleet": "runtime", "eve": "untrusted"}, default="untrusted"
    )
    assert allow.sql_predicate() == "reporter_id IN ('fleet', 'ops-team')"
    assert allow.sql_predicate("o.reporter_id") == "o.reporter_id IN ('fleet', 'ops-team')"
    # nobody named: nothing counts (an empty IN list matches nothing)
    assert ReporterTrust(default="untrusted").sql_predicate() == "reporter_id IN ('')"
    deny = ReporterTrust(levels={"o'brien": "untrusted"})
    assert deny.sql_predicate() == (
        "reporter_id NOT IN ('o''brien', 'opslake-analyzer', 'opslake-ask', 'opslake-consolidator')"
    )


def test_the_sql_predicate_selects_exactly_the_keys_that_count() -> None:
    import duckdb

    keys = ["ops-team", "fleet", "eve", "stranger", "opslake-analyzer", None]
    for trust in (
        ReporterTrust(
            levels={"ops-team": "reporter", "fleet": "runtime", "eve": "untrusted"}, default="untrusted"
        ),
        ReporterTrust(levels={"eve": "untrusted", "opslake-analyzer": "reporter"}),
    ):
        con = duckdb.connect()
        con.execute("CREATE TABLE ops (reporter_id VARCHAR)")
        con.executemany("INSERT INTO ops VALUES (?)", [(k,) for k in keys])
        found = {
            r[0] for r in con.execute(f"SELECT reporter_id FROM ops WHERE {trust.sql_predicate()}").fetchall()
        }
        assert found == {k for k in keys if trust.counts(k)}


def test_witnesses_are_capped_per_key_before_the_overall_cap() -> None:
    """A runtime key claiming 200 agent_ids must not push other keys' witnesses out of a list
    capped at 200 (issue 12): it keeps its cap (5), every other key keeps its witness."""
    runtime = [f"fleet/agent-{i:03d}" for i in range(200)]
    others = [f"key-{i:02d}" for i in range(10)]
    kept = cap_witnesses([*runtime, *others], per_key=RUNTIME_MAX_REPORTERS, total=200)
    assert [w for w in kept if w.startswith("fleet/")] == runtime[:RUNTIME_MAX_REPORTERS]
    assert set(others) <= set(kept) and len(kept) == 15
    # the overall cap still holds, and every key keeps one witness before any keeps two
    many = cap_witnesses(
        [*runtime, *others, *(f"rt-{k}/a{i}" for k in range(50) for i in range(5))], total=20
    )
    assert len(many) == 20 and {w.partition("/")[0] for w in many} >= {"fleet", "key-00"}
    trust = ReporterTrust(levels={"fleet": "runtime"})
    assert trust.count(cap_witnesses([*runtime, *others], total=200)) == trust.count([*runtime, *others])


def test_a_runtime_key_claiming_200_agents_does_not_push_honest_keys_out_of_an_entry() -> None:
    """Issue 12: the witness list is capped at 200; a runtime key claiming 200 agent_ids used to
    fill it (its witnesses sort first), so the entry's recount lost the honest keys and review
    withheld an entry that enough independent reporters vouch for."""
    trust = ReporterTrust(levels={"fleet": "runtime"})
    rows = [op(i, key="fleet", agent=f"agent-{i:03d}") for i in range(200)]
    rows += [op(1000 + i, key=f"zed-{i}", agent="z") for i in range(2)]
    [group] = candidate_groups(rows, [], trust=trust)
    assert group.reporter_count == RUNTIME_MAX_REPORTERS + 2
    assert trust.count(group.reporters) == group.reporter_count  # the list kept counts what was counted
    assert {"zed-0", "zed-1"} <= set(group.reporters)
    [entry] = entries_from(rows, trust, min_reporters=RUNTIME_MAX_REPORTERS + 2)
    assert (entry.status, entry.evidence_reporter_count) == ("active", RUNTIME_MAX_REPORTERS + 2)
    [kept] = review(
        [entry], trust=trust, min_reporters=RUNTIME_MAX_REPORTERS + 2, approval_mode=False, now=NOW
    ).entries
    assert kept.status == "active"
    # merging more of the runtime key's agents into the entry keeps the honest keys too
    more = [op(2000 + i, key="fleet", agent=f"agent-{i + 200:03d}") for i in range(200)]
    [group2] = candidate_groups(more, [], trust=trust)
    merged = merge_candidates(
        [entry], [DistilledCandidate(group2, *distill(group2))], now=NOW, trust=trust, min_reporters=2
    )
    [updated] = merged.entries
    assert {"zed-0", "zed-1"} <= set(updated.evidence_reporters)
    assert len([w for w in updated.evidence_reporters if w.startswith("fleet/")]) == RUNTIME_MAX_REPORTERS


def test_a_signature_keeps_at_most_the_runtime_cap_of_witnesses_per_key() -> None:
    trust = ReporterTrust(levels={"fleet": "runtime"})
    index = SignatureIndex({}, trust=trust)
    failures = [
        FailureSample(
            op_id=f"f{i}",
            endpoint="/sql",
            agent_id=f"agent-{i:03d}",
            reporter_id="fleet" if i < 300 else "alice",
            ts=T0,
            ingested_at=T0,
            error="COLUMN_NOT_FOUND: Column 'x' cannot be resolved",
            error_type="sql_failed",
        )
        for i in range(301)
    ]
    index.apply(failures, count={(f.reporter_id, f.op_id) for f in failures})
    [sig] = index.signatures.values()
    assert sorted(sig.reporters) == ["alice", *(f"fleet/agent-{i:03d}" for i in range(RUNTIME_MAX_REPORTERS))]
