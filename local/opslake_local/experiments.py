"""What the demo's loop proves, read back: each playbook entry's holdout experiment as the
consolidator computed it (table ``playbooks``, never recomputed here), beside the comparison of the
two fleets (the same seeded tasks with and without reading playbooks), and whether they agree.

- **Per entry** (:class:`EntryExperiment`): treatment and holdout failures / ops of its target ops,
  their rates with intervals, Δ = holdout − treatment with its interval and the verdict, all columns
  of ``playbooks``; beside them the *fleets Δ* of the same target ops (ops with the entry's endpoint,
  and task class when it has one): the failure rate of the ``pb-off-*`` keys minus the ``pb-on-*``
  keys from cycle 2 on (SQL on ``ops``), and whether the two agree in sign.
- **Fleets** (:class:`FleetComparison`): failed tool calls / tool calls of each fleet from cycle 2
  on (:class:`~opslake_local.simulator.CycleStats`), Wilson intervals and the Newcombe interval of
  the difference, treating the calls as independent (they are not: each agent has its own mistake
  rates, so the interval is too narrow).
- **Pooled** holdout Δ over the judged entries, weighted nₜnₕ/(nₜ + nₕ) (Mantel–Haenszel): a
  summary, since entries share target ops. "Agree in sign" compares it with the fleets' Δ.

The with-fleet includes keys held out of each entry, so the fleets' Δ is about (1 − holdout share)
× the effect of the entries: the two estimates should agree in sign, not in size.

The demo runs two worlds in one lake (:class:`World`): the staffing fleets on opslake's own tools,
and the service desk's (:mod:`opslake_local.worlds.helpdesk`), whose agents call tools of their own.
Each world's note counts its own keys, entries (those on its endpoints or task classes) and
consolidator groups. For the second world a **scorecard** (:class:`Scorecard`) ties every failed
tool call to its planted cause (the runtime's ground truth, never in the lake) and reads back per
cause its signatures and their purity, the entries that name its fix (by the world's follow rules)
and how often the fleet followed them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Protocol

from opslake.analysis.intervals import mh_risk_difference, newcombe, wilson
from opslake.query.base import QueryEngine, QueryError
from opslake.query.sqltext import sql_string, timestamp_literal
from opslake_local.console import text_table
from opslake_local.simulator.stats import Call, CycleStats
from opslake_local.worlds import helpdesk


class CycleRow(Protocol):
    """What is read of one cycle of the loop (:class:`opslake_local.loop.CycleRow`)."""

    @property
    def cycle(self) -> int: ...
    @property
    def with_playbooks(self) -> CycleStats: ...
    @property
    def without_playbooks(self) -> CycleStats: ...
    @property
    def consolidator(self) -> Mapping[str, Any]: ...
    @property
    def started_at(self) -> datetime: ...


#: The agents' name prefixes (their keys' names: ``pb-on-01``…) of the fleet with and without playbooks.
WITH_PREFIX, WITHOUT_PREFIX = "pb-on", "pb-off"


@dataclass(frozen=True)
class World:
    """One world of the demo: its two fleets' key prefixes, and what is its own: entries and
    consolidator groups on its endpoints or task classes. The first of :data:`WORLDS` owns what no
    other world claims."""

    name: str
    title: str
    with_prefix: str
    without_prefix: str
    endpoints: frozenset[str] = frozenset()
    task_classes: frozenset[str] = frozenset()

    def claims(self, endpoint: Any, task_class: Any) -> bool:
        return endpoint in self.endpoints or task_class in self.task_classes


STAFFING = World("staffing", "opslake's own tools (staffing)", WITH_PREFIX, WITHOUT_PREFIX)
HELPDESK = World(
    "helpdesk",
    "the service desk: its own tools, reported through OpenTelemetry",
    "hd-on",
    "hd-off",
    frozenset(helpdesk.ENDPOINTS),
    frozenset(helpdesk.TASK_CLASSES),
)
WORLDS = (STAFFING, HELPDESK)


def owner(endpoint: Any, task_class: Any, worlds: Sequence[World] = WORLDS) -> World:
    """The world an entry (or ops) with this endpoint and task class belongs to."""
    return next((w for w in worlds[1:] if w.claims(endpoint, task_class)), worlds[0])


def key_owner(
    key: str, worlds: Sequence[World] = WORLDS, endpoints: Mapping[str, str] | None = None
) -> World:
    """The world of a consolidator group, by its key's parts (``contrast|tool:close_ticket|…``; a
    refusal is ``<key>: <reason>``); a part that is a signature id (``diagnosis|sig_…``) stands for
    its endpoint (``endpoints``: signature id → endpoint, table ``signatures``)."""
    parts = key.split(": ", 1)[0].split("|")
    parts += [endpoints[p] for p in parts if endpoints and p in endpoints]
    return next((w for w in worlds[1:] if any(w.claims(p, p) for p in parts)), worlds[0])


#: Verdicts of an experiment that was judged (``insufficient``: not enough keys or ops yet).
JUDGED = ("helpful", "harmful", "no_effect", "undecided")
#: Routes that are the fleet's overhead, never an entry's target.
_OVERHEAD = ("/playbooks", "playbook:followed")

ENTRIES_SQL = """SELECT entry_id, status, kind, endpoint, task_class, trigger, action, instead_of, confidence,
       fix_kind, fix_names,
       experiment_stage, holdout_share, treatment_units, holdout_units, treatment_ops, treatment_failures,
       treatment_rate, treatment_rate_low, treatment_rate_high, holdout_ops, holdout_failures, holdout_rate,
       holdout_rate_low, holdout_rate_high, effect, effect_low, effect_high, design_effect, last_verdict,
       helpful_count, harmful_count, neutral_count, followed_treatment, followed_holdout, retired_reason,
       published_at
FROM playbooks WHERE published_at IS NOT NULL ORDER BY entry_id"""


#: Each signature's endpoint: whose a consolidator group keyed by a signature (a diagnosis) is.
SIGNATURE_ENDPOINTS_SQL = "SELECT signature_id, endpoint FROM signatures"


def fleet_ops_sql(since: datetime, world: World = STAFFING) -> str:
    """Ops and failures per (endpoint, task class, fleet) of the world's two fleets' keys since
    ``since``: calls only, as the experiments count them
    (:func:`~opslake.analysis.playbooks.contrast_sql.calls_only`)."""
    # imported here, not above: opslake.analysis.playbooks builds opslake's logger, and the demo's
    # modules must import none (test_local_quiet); when this runs, the stack has imported it already
    from opslake.analysis.playbooks.contrast_sql import calls_only

    prefixes = (world.with_prefix, world.without_prefix)
    fleets = " OR ".join(f"reporter_id LIKE {sql_string(p + '-%')}" for p in prefixes)
    overhead = ", ".join(sql_string(e) for e in _OVERHEAD)
    with_fleet = f"reporter_id LIKE {sql_string(world.with_prefix + '-%')}"
    return f"""SELECT endpoint, task_class, {with_fleet} AS with_playbooks,
       count(*) AS ops, count_if(NOT success) AS failures
FROM ops WHERE ts >= {timestamp_literal(since)} AND ({fleets}) AND endpoint NOT IN ({overhead})
  AND {calls_only()}
GROUP BY 1, 2, 3"""


@dataclass(frozen=True)
class Proportion:
    """``failures`` of ``ops`` with its Wilson interval."""

    failures: int
    ops: int
    low: float
    high: float

    @classmethod
    def of(cls, failures: int, ops: int) -> Proportion:
        low, high = wilson(failures, ops)
        return cls(failures, ops, low, high)

    @property
    def rate(self) -> float:
        return self.failures / self.ops if self.ops else 0.0


@dataclass(frozen=True)
class FleetComparison:
    """Failed tool calls of the fleet with playbooks and the one without, from ``first_cycle`` on;
    ``delta`` = without − with (positive: the fleet that reads playbooks fails less), Newcombe."""

    with_playbooks: Proportion
    without_playbooks: Proportion
    delta: float
    low: float
    high: float
    first_cycle: int = 2


@dataclass(frozen=True)
class EntryExperiment:
    """One published entry's experiment as table ``playbooks`` holds it, and its fleets Δ."""

    entry_id: str
    status: str
    endpoint: str | None
    task_class: str | None
    fix: str
    action: str
    stage: str | None
    verdict: str | None
    treatment_failures: int | None
    treatment_ops: int | None
    treatment_rate: float | None
    treatment_low: float | None
    treatment_high: float | None
    holdout_failures: int | None
    holdout_ops: int | None
    holdout_rate: float | None
    holdout_low: float | None
    holdout_high: float | None
    effect: float | None
    effect_low: float | None
    effect_high: float | None
    helpful_count: int = 0
    harmful_count: int = 0
    followed_treatment: int = 0
    followed_holdout: int = 0
    fleet_delta: float | None = None  # pb-off − pb-on failure rate of the entry's target ops, cycles 2+
    sign: str = "—"  # "agree", "differ" or "—" (a side is empty or zero)

    @property
    def judged(self) -> bool:
        return self.verdict in JUDGED and bool(self.treatment_ops) and bool(self.holdout_ops)


@dataclass(frozen=True)
class Experiments:
    """The closing note's numbers: entries published and refused, each entry's experiment, the
    fleets, the pooled holdout Δ and whether it agrees in sign with the fleets' Δ."""

    entries: list[EntryExperiment]
    published: int
    refused_by_gate: dict[str, int]
    nothing_specific: (
        int  # candidate groups the distiller found nothing specific to say about (never drafted)
    )
    fleets: FleetComparison
    pooled: float | None  # None: no judged entry
    judged: int
    agreement: str  # "yes", "no" or "—"
    error: str | None = None  # why table playbooks could not be read

    @property
    def refused(self) -> int:
        return sum(self.refused_by_gate.values())

    def summary(self) -> dict[str, Any]:
        """JSON-ready: ``experiments`` (one dict per entry) and ``agreement`` (the fleets, the pooled
        holdout Δ and the sign agreement), for the demo summary and the report."""
        fleets = self.fleets
        return {
            "experiments": [asdict(e) for e in self.entries],
            "agreement": {
                "entries_published": self.published,
                "refused_by_quality_gate": self.refused,
                "refused_by_reason": dict(self.refused_by_gate),
                "nothing_specific": self.nothing_specific,
                "fleet_with": asdict(fleets.with_playbooks) | {"rate": fleets.with_playbooks.rate},
                "fleet_without": asdict(fleets.without_playbooks) | {"rate": fleets.without_playbooks.rate},
                "fleet_delta": fleets.delta,
                "fleet_delta_low": fleets.low,
                "fleet_delta_high": fleets.high,
                "fleet_first_cycle": fleets.first_cycle,
                "pooled_holdout_delta": self.pooled,
                "judged_entries": self.judged,
                "agree_in_sign": self.agreement,
            },
        }


# ---- pure parts ---------------------------------------------------------------------------------
def fleet_comparison(rows: Sequence[CycleRow], first_cycle: int = 2) -> FleetComparison:
    """The two fleets' failed tool calls from ``first_cycle`` on (the first cycle runs before any
    entry exists), with Wilson intervals and the Newcombe interval of without − with."""
    later = [r for r in rows if r.cycle >= first_cycle]
    with_ = Proportion.of(
        sum(r.with_playbooks.tool_failures for r in later), sum(r.with_playbooks.tool_calls for r in later)
    )
    without = Proportion.of(
        sum(r.without_playbooks.tool_failures for r in later),
        sum(r.without_playbooks.tool_calls for r in later),
    )
    delta, low, high = newcombe(without.failures, without.ops, with_.failures, with_.ops)
    return FleetComparison(with_, without, delta, low, high, first_cycle)


def refused_by_gate(
    consolidator_runs: Iterable[Mapping[str, Any]],
    world: World | None = None,
    worlds: Sequence[World] = WORLDS,
    endpoints: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """``ConsolidatorRun.refused_by_gate`` (reason → entries) summed over the runs; runs without it
    count nothing. With ``world``: that world's share. A world other than the first counts the
    gate's refusals among the runs' rejected candidates of its own groups (``rejected``: "key:
    reason"; whose a key is: :func:`key_owner` with ``endpoints``); the first world gets the rest of
    the total (stored entries the gate withheld included)."""
    runs = list(consolidator_runs)
    total: Counter[str] = Counter()
    for run in runs:
        refused = run.get("refused_by_gate")
        if isinstance(refused, Mapping):
            for reason, count in refused.items():
                total[str(reason)] += int(count or 0)
    if world is not None:
        others = {w.name: _rejected_by_gate(runs, w, worlds, endpoints) for w in worlds[1:]}
        if world in worlds[1:]:
            total = others[world.name]
        else:
            for counts in others.values():
                total -= counts
    return dict(sorted(total.items(), key=lambda item: (-item[1], item[0])))


def _rejected_by_gate(
    runs: Sequence[Mapping[str, Any]],
    world: World,
    worlds: Sequence[World],
    endpoints: Mapping[str, str] | None,
) -> Counter[str]:
    """The quality gate's refusals (by its label) among the runs' rejected candidates of ``world``."""
    from opslake.analysis.playbooks.quality import QUALITY, quality_label  # see fleet_ops_sql

    counts: Counter[str] = Counter()
    for run in runs:
        for rejected in run.get("rejected") or ():
            at = str(rejected).find(QUALITY)
            label = quality_label(str(rejected)[at:]) if at >= 0 else None
            if label and key_owner(str(rejected), worlds, endpoints) == world:
                counts[label] += 1
    return counts


def nothing_specific(
    consolidator_runs: Iterable[Mapping[str, Any]],
    world: World | None = None,
    worlds: Sequence[World] = WORLDS,
    endpoints: Mapping[str, str] | None = None,
) -> int:
    """Distinct candidate groups (``ConsolidatorRun.nothing_specific``: their keys) that no run found
    anything specific to say about: never drafted, so never refused either (a group seen again in a
    later run counts once). With ``world``: that world's groups only (see :func:`key_owner`)."""
    groups: set[str] = set()
    for run in consolidator_runs:
        keys = run.get("nothing_specific")
        if isinstance(keys, list | tuple):
            groups.update(
                str(k) for k in keys if world is None or key_owner(str(k), worlds, endpoints) == world
            )
    return len(groups)


def sign_agreement(a: float | None, b: float | None) -> str:
    """``agree`` / ``differ`` on the signs of two point estimates; ``—`` when either is missing or 0."""
    if a is None or b is None or a == 0 or b == 0:
        return "—"
    return "agree" if (a > 0) == (b > 0) else "differ"


def fix_label(row: Mapping[str, Any]) -> str:
    """What an entry fixes, shortly: its endpoint (or task class) and its fix kind with the names
    (``/sql column workers.hourly_rate``); an entry without a fix kind shows its action's start."""
    where = row.get("endpoint") or row.get("task_class") or "any"
    names = [str(n) for n in row.get("fix_names") or ()]
    if row.get("fix_kind"):
        joined = ".".join(names) if row["fix_kind"] == "column" else ", ".join(names)
        return f"{where} {row['fix_kind']} {joined}".strip()
    action = str(row.get("action") or "")
    return f"{where} {action[:32] + '…' if len(action) > 33 else action}"


def fleet_delta(
    fleet_rows: Sequence[Mapping[str, Any]], endpoint: str | None, task_class: str | None
) -> float | None:
    """pb-off − pb-on failure rate of the ops an entry targets (its endpoint, and its task class
    when it has one); None when either fleet has none."""
    sums = {True: [0, 0], False: [0, 0]}
    for row in fleet_rows:
        if endpoint is not None and row.get("endpoint") != endpoint:
            continue
        if task_class is not None and row.get("task_class") != task_class:
            continue
        if endpoint is None and task_class is None:
            continue
        counts = sums[bool(row.get("with_playbooks"))]
        counts[0] += int(row.get("failures") or 0)
        counts[1] += int(row.get("ops") or 0)
    (on_x, on_n), (off_x, off_n) = sums[True], sums[False]
    if not on_n or not off_n:
        return None
    return off_x / off_n - on_x / on_n


def entry_experiment(row: Mapping[str, Any], fleet_rows: Sequence[Mapping[str, Any]]) -> EntryExperiment:
    """One row of table ``playbooks`` as the closing note shows it (its numbers as they are)."""

    def count(name: str) -> int | None:
        value = row.get(name)
        return None if value is None else int(value)

    def number(name: str) -> float | None:
        value = row.get(name)
        return None if value is None else float(value)

    delta = fleet_delta(fleet_rows, row.get("endpoint"), row.get("task_class"))
    effect = number("effect")
    return EntryExperiment(
        entry_id=str(row["entry_id"]),
        status=str(row.get("status") or ""),
        endpoint=row.get("endpoint"),
        task_class=row.get("task_class"),
        fix=fix_label(row),
        action=str(row.get("action") or ""),
        stage=row.get("experiment_stage"),
        verdict=row.get("last_verdict"),
        treatment_failures=count("treatment_failures"),
        treatment_ops=count("treatment_ops"),
        treatment_rate=number("treatment_rate"),
        treatment_low=number("treatment_rate_low"),
        treatment_high=number("treatment_rate_high"),
        holdout_failures=count("holdout_failures"),
        holdout_ops=count("holdout_ops"),
        holdout_rate=number("holdout_rate"),
        holdout_low=number("holdout_rate_low"),
        holdout_high=number("holdout_rate_high"),
        effect=effect,
        effect_low=number("effect_low"),
        effect_high=number("effect_high"),
        helpful_count=count("helpful_count") or 0,
        harmful_count=count("harmful_count") or 0,
        followed_treatment=count("followed_treatment") or 0,
        followed_holdout=count("followed_holdout") or 0,
        fleet_delta=delta,
        sign=sign_agreement(effect, delta),
    )


def pooled_holdout_delta(entries: Sequence[EntryExperiment]) -> tuple[float | None, int]:
    """The judged entries' holdout Δ pooled with weights nₜnₕ/(nₜ + nₕ), and how many were pooled."""
    arms = [
        (e.holdout_failures or 0, e.holdout_ops or 0, e.treatment_failures or 0, e.treatment_ops or 0)
        for e in entries
        if e.judged
    ]
    return (mh_risk_difference(arms) if arms else None), len(arms)


def experiments_from(
    entry_rows: Sequence[Mapping[str, Any]],
    fleet_rows: Sequence[Mapping[str, Any]],
    rows: Sequence[CycleRow],
    *,
    first_cycle: int = 2,
    error: str | None = None,
    world: World = STAFFING,
    endpoints: Mapping[str, str] | None = None,
) -> Experiments:
    """One world's closing note from table ``playbooks``' rows (the world's own are kept), its fleets'
    ops per target and the cycles (``endpoints``: each signature's, to tell whose a diagnosis is)."""
    own = [r for r in entry_rows if owner(r.get("endpoint"), r.get("task_class")) == world]
    entries = [entry_experiment(r, fleet_rows) for r in own]
    fleets = fleet_comparison(rows, first_cycle)
    pooled, judged = pooled_holdout_delta(entries)
    agree = sign_agreement(pooled, fleets.delta)
    return Experiments(
        entries=entries,
        published=len(entries),
        refused_by_gate=refused_by_gate((r.consolidator for r in rows), world, endpoints=endpoints),
        nothing_specific=nothing_specific((r.consolidator for r in rows), world, endpoints=endpoints),
        fleets=fleets,
        pooled=pooled,
        judged=judged,
        agreement={"agree": "yes", "differ": "no"}.get(agree, "—"),
        error=error,
    )


# ---- the closing note ---------------------------------------------------------------------------
EXPERIMENT_HEADER = (
    "entry",
    "fix",
    "treatment",
    "holdout",
    "Δ holdout−treatment",
    "verdict",
    "fleets Δ",
    "sign",
)
CAVEATS = (
    "the fleet with playbooks includes the keys held out of each entry: its Δ is about "
    "(1 − holdout share) × the entries' effect, so the two should agree in sign, not in size",
    "entries share target ops (one /sql call is the target of every /sql entry): the pooled Δ is a summary",
    "a few keys per arm: the intervals are wide, and many entries stay undecided; the fleets' interval "
    "treats tool calls as independent (each agent has its own mistake rates), so it is too narrow",
)


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def points(value: float | None) -> str:
    """A difference of rates in percentage points, signed (``+8.8 pp``)."""
    return "—" if value is None else f"{value * 100:+.1f} pp"


def interval(low: float | None, high: float | None, *, signed: bool = False) -> str:
    if low is None or high is None:
        return ""
    form = "{:+.1f}" if signed else "{:.1f}"
    return f"[{form.format(low * 100)},{form.format(high * 100)}]"


def arm_cell(
    failures: int | None, ops: int | None, rate: float | None, low: float | None, high: float | None
) -> str:
    """``2/31 6.5% [1.8,20.7]``, or ``—`` when the arm has no ops yet."""
    if not ops or failures is None:
        return "—"
    return f"{failures}/{ops} {percent(rate)} {interval(low, high)}".rstrip()


def experiment_row(e: EntryExperiment) -> tuple[str, ...]:
    effect = (
        "—"
        if e.effect is None
        else f"{points(e.effect)} {interval(e.effect_low, e.effect_high, signed=True)}"
    )
    verdict = (e.verdict or "not judged") + ("" if e.status == "active" else f" ({e.status})")
    return (
        e.entry_id,
        e.fix,
        arm_cell(e.treatment_failures, e.treatment_ops, e.treatment_rate, e.treatment_low, e.treatment_high),
        arm_cell(e.holdout_failures, e.holdout_ops, e.holdout_rate, e.holdout_low, e.holdout_high),
        effect.rstrip(),
        verdict,
        points(e.fleet_delta),
        e.sign,
    )


def closing_note(x: Experiments, *, caveats: bool = True) -> list[str]:
    """One world's closing note: entries published and refused, each entry's holdout experiment as
    the consolidator computed it beside its fleets Δ, the two fleets, the pooled Δ and the agreement,
    and (``caveats``) the caveats. Deterministic for a seed (no timings, no wall-clock values)."""
    reasons = ", ".join(f"{n} {reason}" for reason, n in x.refused_by_gate.items())
    lines = [f"entries published {x.published} · refused by the quality gate {x.refused}"
             + (f" ({reasons})" if reasons else "")
             + f" · groups with nothing specific to say (not drafted) {x.nothing_specific}"]  # fmt: skip
    if x.error:
        lines.append(f"table playbooks could not be read: {x.error}")
    elif x.entries:
        ordered = sorted(x.entries, key=lambda e: (e.status != "active", e.entry_id))
        lines += text_table(EXPERIMENT_HEADER, [experiment_row(e) for e in ordered]).splitlines()
    f, on, off = x.fleets, x.fleets.with_playbooks, x.fleets.without_playbooks
    lines.append(
        f"two fleets, cycles {f.first_cycle}+: with {percent(on.rate)} {interval(on.low, on.high)} of "
        f"{on.ops} tool calls · without {percent(off.rate)} {interval(off.low, off.high)} of {off.ops} · "
        f"Δ {points(f.delta)} {interval(f.low, f.high, signed=True)} (tool calls treated as independent)"
    )
    pooled = (
        f"pooled holdout Δ {points(x.pooled)} (Mantel–Haenszel, {x.judged} judged entries)"
        if x.pooled is not None
        else "pooled holdout Δ — (no entry judged yet)"
    )
    lines.append(f"{pooled} · agree in sign: {x.agreement}")
    if caveats:
        lines += [f"caveat: {c}" for c in CAVEATS]
    return lines


# ---- reading the lake ---------------------------------------------------------------------------
def read_experiments(
    engine: QueryEngine, rows: Sequence[CycleRow], first_cycle: int = 2, *, world: World = STAFFING
) -> Experiments:
    """The closing note of a world's cycles ``rows``: table ``playbooks`` and the fleets' ops in
    ``ops`` through ``engine``. A table that cannot be read gives no entries and says why (``error``)."""
    later = [r for r in rows if r.cycle >= first_cycle]
    try:
        entry_rows = engine.run(ENTRIES_SQL).records()
        fleet_rows = engine.run(fleet_ops_sql(later[0].started_at, world)).records() if later else []
        endpoints = {
            str(r["signature_id"]): str(r["endpoint"]) for r in engine.run(SIGNATURE_ENDPOINTS_SQL).records()
        }
    except QueryError as exc:
        return experiments_from([], [], rows, first_cycle=first_cycle, error=exc.message, world=world)
    return experiments_from(
        entry_rows, fleet_rows, rows, first_cycle=first_cycle, world=world, endpoints=endpoints
    )


# ---- the second world's scorecard ---------------------------------------------------------------
@dataclass(frozen=True)
class CauseScore:
    """One cause of the world's failed tool calls (a planted mistake, or transient noise no entry can
    prevent): how often it happened, the signatures its failures got and their purity, the entries
    that name its fix and how often the fleet that reads playbooks followed them."""

    cause: str
    tool: str
    planted: bool
    contrasts: tuple[str, ...]  # the contrasts that can see it
    made_with: int  # mistakes made (noise: failed calls) by the fleet with playbooks
    made_without: int  # … and by the fleet without
    avoided: int  # rolled, but a followed entry switched it off
    failed_calls: int  # both fleets
    signatures: tuple[str, ...]  # of its failed calls (the failures view's, merges applied)
    purity: float | None  # min over its signatures of the share of their failures this cause made
    entries: tuple[str, ...]  # published entries of the world that name its fix
    followed: int  # tasks of the fleet with playbooks that followed an entry fixing it


@dataclass(frozen=True)
class Scorecard:
    """The second world's causes and what opslake learnt of them."""

    causes: list[CauseScore]
    signatures: int  # distinct signatures of the world's failed tool calls
    published: int  # entries of the world published
    naming_fix: tuple[str, ...]  # … that name a planted mistake's fix or rule
    generic: tuple[str, ...]  # … that name none
    unmatched: int  # failed calls not found in the failures view
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "mistakes": [asdict(c) for c in self.causes],
            "scorecard": {
                "signatures": self.signatures,
                "entries_published": self.published,
                "entries_naming_fix": list(self.naming_fix),
                "generic_entries": list(self.generic),
                "unmatched_failures": self.unmatched,
                "error": self.error,
            },
        }


def _failed_tool_calls(stats: CycleStats) -> list[Call]:
    return [c for c in stats.calls if c.method == "TOOL" and c.status >= 400 and c.op_id]


def scorecard_from(
    rows: Sequence[CycleRow],
    signature_of: Mapping[str, str],
    entry_rows: Sequence[Mapping[str, Any]],
    *,
    world: World = HELPDESK,
    error: str | None = None,
) -> Scorecard:
    """The scorecard from the cycles' calls (each with its cause and op id), the failures view's
    signature per op id, and table ``playbooks``' rows (the world's own are kept)."""
    calls = [(c, True) for r in rows for c in _failed_tool_calls(r.with_playbooks)]
    calls += [(c, False) for r in rows for c in _failed_tool_calls(r.without_playbooks)]
    by_signature: dict[str, Counter[str]] = {}
    for call, _ in calls:
        signature = signature_of.get(str(call.op_id))
        if signature is not None:
            by_signature.setdefault(signature, Counter())[str(call.mode)] += 1
    own = [r for r in entry_rows if owner(r.get("endpoint"), r.get("task_class")) == world]
    fixed = {str(r["entry_id"]): helpdesk.modes_fixed(r) for r in own}
    causes = [*helpdesk.MODES, *helpdesk.NOISE]
    causes += sorted({str(c.mode) for c, _ in calls} - set(causes))
    scores = []
    for cause in causes:
        mode, noise = helpdesk.MODES.get(cause), helpdesk.NOISE.get(cause)
        mine = [(c, with_) for c, with_ in calls if c.mode == cause]
        signatures = tuple(sorted(s for s, counts in by_signature.items() if counts[cause]))
        purities = [by_signature[s][cause] / by_signature[s].total() for s in signatures]
        if mode is not None:
            made_with = sum(r.with_playbooks.mistakes[cause] for r in rows)
            made_without = sum(r.without_playbooks.mistakes[cause] for r in rows)
        else:
            made_with, made_without = sum(w for _, w in mine), sum(not w for _, w in mine)
        scores.append(
            CauseScore(
                cause=cause,
                tool=mode.tool if mode else noise.tool if noise else "",
                planted=mode is not None,
                contrasts=mode.contrasts if mode else (),
                made_with=made_with,
                made_without=made_without,
                avoided=sum(r.with_playbooks.avoided[cause] for r in rows),
                failed_calls=len(mine),
                signatures=signatures,
                purity=min(purities) if purities else None,
                entries=tuple(e for e, modes in fixed.items() if cause in modes),
                followed=sum((r.with_playbooks.fixed_by.get(cause) or Counter()).total() for r in rows),
            )
        )
    return Scorecard(
        causes=scores,
        signatures=len(by_signature),
        published=len(own),
        naming_fix=tuple(e for e, modes in fixed.items() if modes),
        generic=tuple(e for e, modes in fixed.items() if not modes),
        unmatched=sum(1 for c, _ in calls if str(c.op_id) not in signature_of),
        error=error,
    )


def failures_sql(world: World = HELPDESK) -> str:
    """The failures view's signature of each failed op on the world's endpoints, by its fleets' keys."""
    fleets = " OR ".join(
        f"reporter_id LIKE {sql_string(p + '-%')}" for p in (world.with_prefix, world.without_prefix)
    )
    endpoints = ", ".join(sql_string(e) for e in sorted(world.endpoints))
    return f"SELECT op_id, signature_id FROM failures WHERE endpoint IN ({endpoints}) AND ({fleets})"


def read_scorecard(engine: QueryEngine, rows: Sequence[CycleRow], *, world: World = HELPDESK) -> Scorecard:
    """The second world's scorecard: its cycles' calls, the failures view and table ``playbooks``
    through ``engine`` (a query that fails gives an empty lake side and says why)."""
    try:
        signature_of = {
            str(r["op_id"]): str(r["signature_id"]) for r in engine.run(failures_sql(world)).records()
        }
        entry_rows = engine.run(ENTRIES_SQL).records()
    except QueryError as exc:
        return scorecard_from(rows, {}, [], world=world, error=exc.message)
    return scorecard_from(rows, signature_of, entry_rows, world=world)


SCORECARD_HEADER = (
    "cause",
    "tool",
    "contrasts that can see it",
    "made with/without",
    "avoided",
    "failed calls",
    "signatures",
    "purity",
    "entries naming its fix",
    "followed",
)


def scorecard_row(c: CauseScore) -> tuple[str, ...]:
    entries = ", ".join(c.entries) if c.entries else ("—" if c.planted else "— (none expected)")
    return (
        c.cause if c.planted else f"{c.cause} (transient)",
        c.tool,
        ", ".join(c.contrasts) or "—",
        f"{c.made_with}/{c.made_without}",
        str(c.avoided) if c.planted else "—",
        str(c.failed_calls),
        str(len(c.signatures)),
        "—" if c.purity is None else f"{c.purity:.2f}",
        entries,
        str(c.followed) if c.planted else "—",
    )


def scorecard_lines(card: Scorecard) -> list[str]:
    """The scorecard's lines: one row per cause, then the totals the issue asks for."""
    lines = text_table(SCORECARD_HEADER, [scorecard_row(c) for c in card.causes]).splitlines()
    planted = [c for c in card.causes if c.planted]
    per_cause = [len(c.signatures) for c in card.causes if c.failed_calls]
    purities = [c.purity for c in card.causes if c.purity is not None]
    spread = f"{min(per_cause)}–{max(per_cause)}" if per_cause and min(per_cause) != max(per_cause) else (
        str(per_cause[0]) if per_cause else "—")  # fmt: skip
    lines.append(
        f"{len(planted)} planted mistakes and {len(card.causes) - len(planted)} other causes → "
        f"{card.signatures} signatures ({spread} per cause), purity "
        + (f"min {min(purities):.2f}" if purities else "—")
        + f" · planted mistakes with an entry naming their fix: {sum(1 for c in planted if c.entries)}/{len(planted)}"
    )
    generic = f" ({', '.join(card.generic)})" if card.generic else ""
    lines.append(
        f"entries published {card.published}: naming a planted mistake's fix or rule {len(card.naming_fix)}, "
        f"generic {len(card.generic)}{generic}"
    )
    if card.unmatched:
        lines.append(f"{card.unmatched} failed tool calls are not in the failures view")
    if card.error:
        lines.append(f"the lake could not be read: {card.error}")
    return lines
