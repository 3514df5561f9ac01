"""Holdout experiments: does an entry make the ops it targets fail less? Treatment against holdout
over the same period, never before against after.

**Arms** are decided where entries are served (``GET /playbooks``): each (API key name, entry) pair
is hashed into treatment or holdout (:func:`~opslake.models.playbooks.arm_of`), and the op record
of the read says what was served (``attributes.entry_ids``) and what was withheld
(``withheld_ids``), with ``holdout = '1'``; records without it were written before arms existed
and are ignored. This module never recomputes a hash: the records decide.

**Measurement** (:func:`experiment_sql`, one query for every active entry): intent-to-treat per
(key, entry) from the key's first read of the entry, served or withheld. Every later op of that
key on the entry's target (its ``endpoint``, and ``task_class`` when set) counts in the key's arm
(calls only: never a /log report, a rescue report or an overseer's correction about a call);
a key that moved from holdout to treatment (the share only shrinks, at graduation) counts in
holdout until its first treatment read. An entry's period starts at ``max(lookback start,
experiment_started_at)``, the same for both arms. Ops of keys that do not count under the trust
levels (untrusted keys, opslake's own) count in no arm, so they cannot steer an experiment. The
answer is one row per (entry, key, arm): the per-key counts give the design effect and the
leave-one-key-out guard. Follows (``playbook:followed`` ops of the SDK's ``report_followed``)
are counted per entry and arm in the same query: follows in holdout mean contamination (an
exported skill, another key); they are reported, never decisive.

**Primary metric**: any failure of the target ops (harm in another signature counts);
failures of the entry's own signature (``sig_failures``) are kept as a secondary figure.

**Interval** (:func:`judge`): the design effect of the keys' clusters (Rao–Scott, the larger of
the two arms', stored as ``design_effect``) divides both arms' counts, then Wilson per arm and
Newcombe's hybrid score interval for Δ = p_holdout − p_treatment (> 0: the entry helps).

**Judgement** (only with ``min_units`` keys and ``min_ops`` ops per arm, and ``min_ops`` new ops
in each arm since the last judgement): helpful when low > 0, harmful when high < 0, no_effect
when the whole interval lies within ±``min_effect``, else undecided. A helpful or harmful verdict
stands only if the sign of Δ survives dropping any single key (one poisoning key or one odd agent
cannot retire or graduate an entry). ``helpful_streak`` helpful verdicts in a row graduate an
entry (its holdout shrinks to a small permanent share; measurement goes on); harmful and
no_effect retire it (approved entries too). ``confidence`` never moves here: it is the
distiller's prior, for ranking only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, get_args

from opslake.analysis.intervals import design_effect, newcombe, wilson
from opslake.analysis.playbooks.contrast_sql import calls_only, signature_of_failure
from opslake.analysis.reporters import ReporterTrust
from opslake.analysis.template_merge import merged_signature_sql
from opslake.config import Settings
from opslake.models.playbooks import Arm, PlaybookEntry, Verdict
from opslake.models.window import Window
from opslake.query.sqltext import sql_string, sql_string_list, timestamp_literal, window_predicate

#: The endpoint and event kind of a follow reported by the SDK (``OpsLake.report_followed``).
FOLLOWED_ENDPOINT = "playbook:followed"
FOLLOWED_EVENT_KIND = "playbook_followed"
#: The sources of the records the server writes of a GET /playbooks read (REST and MCP).
SERVED_BY = ("gateway", "mcp")
#: A unit whose records contradict the rules (served first, withheld later): dropped and counted.
CROSSED = "crossed"
_ARMS: tuple[str, ...] = get_args(Arm)
__all__ = [
    "ATHENA_MAX_QUERY_BYTES", "CROSSED", "FOLLOWED_ENDPOINT", "FOLLOWED_EVENT_KIND", "SERVED_BY", "ArmRow", "Cell",
    "ExperimentResult", "Rules", "apply_experiment", "cells", "experiment_queries", "experiment_since",
    "experiment_sql", "judge", "measurable", "sign_survives", "signature_of_failure", "start_experiments",
]  # fmt: skip
_DIGITS = 6


def experiment_since(entry: PlaybookEntry, lookback: Window) -> datetime:
    """When an entry's period starts: the lookback's start, or its experiment's if later."""
    started = entry.experiment_started_at
    return lookback.start if started is None else max(lookback.start, started)


def _nullable(value: str | None) -> str:
    return "CAST(NULL AS varchar)" if value is None else sql_string(value)


def measurable(entry: PlaybookEntry) -> bool:
    """An entry is measured when it is active and names the endpoint its target ops are on."""
    return entry.status == "active" and entry.endpoint is not None


def experiment_sql(
    table: str, lookback: Window, entries: Sequence[PlaybookEntry], trust: ReporterTrust
) -> str | None:
    """The arms' counts of every measurable entry in ``entries`` over ``lookback``: one row per
    (entry_id, reporter_id, arm) with ``ops``, ``failures``, ``sig_failures`` and ``followed``;
    ``arm`` is ``treatment``, ``holdout`` or ``crossed``. Athena SQL (DuckDB runs it through
    :mod:`opslake.query.dialect`). None when no entry is measurable."""
    measured = [e for e in entries if measurable(e)]
    if not measured:
        return None
    counted = trust.sql_predicate("reporter_id")
    where = f"{window_predicate(lookback)} AND {counted}"
    # Only the server's own records of a read decide an arm: a client may report "/playbooks" ops
    # through /events, but never with a source the server reserves (models.ops.RESERVED_SOURCES).
    reads = (
        f"{where} AND endpoint = '/playbooks' AND source IN ({sql_string_list(SERVED_BY)}) "
        "AND element_at(attributes, 'holdout') = '1'"
    )
    targets = ",\n    ".join(
        f"({sql_string(e.entry_id)}, {sql_string(e.endpoint or '')}, {_nullable(e.task_class)}, "
        f"{_nullable(e.signature_id)}, {timestamp_literal(experiment_since(e, lookback))})"
        for e in measured
    )
    first = "coalesce(least(u.holdout_from, u.treatment_from), u.holdout_from, u.treatment_from)"
    arm = (
        f"CASE WHEN coalesce(u.treatment_from < u.holdout_from, false) THEN '{CROSSED}' "
        "WHEN {ts} >= u.treatment_from THEN 'treatment' ELSE 'holdout' END"
    )
    followed = (
        f"(endpoint = {sql_string(FOLLOWED_ENDPOINT)} OR event_kind = {sql_string(FOLLOWED_EVENT_KIND)})"
    )
    return f"""WITH reads AS (
  SELECT reporter_id, r.entry_id, 'treatment' AS arm, ts
  FROM {table} CROSS JOIN UNNEST(split(element_at(attributes, 'entry_ids'), ',')) AS r(entry_id)
  WHERE {reads} AND element_at(attributes, 'entry_ids') <> ''
  UNION ALL
  SELECT reporter_id, r.entry_id, 'holdout' AS arm, ts
  FROM {table} CROSS JOIN UNNEST(split(element_at(attributes, 'withheld_ids'), ',')) AS r(entry_id)
  WHERE {reads} AND element_at(attributes, 'withheld_ids') <> ''
), units AS (
  SELECT reporter_id, entry_id, min(CASE WHEN arm = 'holdout' THEN ts END) AS holdout_from,
         min(CASE WHEN arm = 'treatment' THEN ts END) AS treatment_from
  FROM reads GROUP BY reporter_id, entry_id
), targets(entry_id, endpoint, task_class, signature_id, since) AS (
  VALUES
    {targets}
), ut AS (
  -- each unit with its target first, so that the ops join on (key, endpoint) at once: joined on the
  -- key alone, every op met every unit of its key (11M rows for 3.75M at 1M ops x 50 entries)
  -- an entry's signature may since have been merged into another (word variants): count that one's failures
  SELECT u.entry_id, u.reporter_id, u.holdout_from, u.treatment_from, t.endpoint, t.task_class,
         {merged_signature_sql("t.signature_id")} AS signature_id, greatest(t.since, {first}) AS from_ts
  FROM units u JOIN targets t ON t.entry_id = u.entry_id
), o AS (
  -- the raw signature in a subquery, looked up in signature_merges once it is a column (masking once per op)
  SELECT reporter_id, ts, endpoint, task_class, success, {merged_signature_sql("r.raw_signature_id")} AS signature_id
  FROM (
    SELECT reporter_id, ts, endpoint, task_class, success, {signature_of_failure(merged=False)} AS raw_signature_id
    FROM {table}
    WHERE {where} AND {calls_only()} AND endpoint IN ({sql_string_list(e.endpoint or "" for e in measured)})
  ) r
), f AS (
  SELECT reporter_id, r.entry_id, ts
  FROM {table} CROSS JOIN UNNEST(split(element_at(attributes, 'entry_ids'), ',')) AS r(entry_id)
  WHERE {where} AND {followed} AND element_at(attributes, 'entry_ids') <> ''
)
SELECT u.entry_id, u.reporter_id, {arm.format(ts="o.ts")} AS arm, count(*) AS ops,
       count_if(NOT o.success) AS failures,
       count_if(NOT o.success AND coalesce(o.signature_id = u.signature_id, false)) AS sig_failures, 0 AS followed
FROM ut u JOIN o ON o.reporter_id = u.reporter_id AND o.endpoint = u.endpoint
      AND (u.task_class IS NULL OR o.task_class = u.task_class) AND o.ts >= u.from_ts
GROUP BY 1, 2, 3
UNION ALL
SELECT u.entry_id, u.reporter_id, {arm.format(ts="f.ts")} AS arm, 0 AS ops, 0 AS failures,
       0 AS sig_failures, count(*) AS followed
FROM ut u JOIN f ON f.reporter_id = u.reporter_id AND f.entry_id = u.entry_id AND f.ts >= u.from_ts
GROUP BY 1, 2, 3"""


#: Athena refuses a query string longer than this (its service quota, in bytes).
ATHENA_MAX_QUERY_BYTES = 262_144


def experiment_queries(
    table: str,
    lookback: Window,
    entries: Sequence[PlaybookEntry],
    trust: ReporterTrust,
    *,
    max_bytes: int = ATHENA_MAX_QUERY_BYTES,
) -> list[str]:
    """:func:`experiment_sql` of every measurable entry, split into queries of at most ``max_bytes``
    (each entry's rows depend on its own target and reads only, so the split changes no row): the
    targets list grows with the active entries and their agent-chosen endpoints and task classes,
    and one query over Athena's limit would leave every entry unmeasured. Empty when none is measurable."""
    measured = [e for e in entries if measurable(e)]
    sql = experiment_sql(table, lookback, measured, trust)
    if sql is None:
        return []
    if len(sql.encode()) <= max_bytes or len(measured) == 1:
        return [sql]
    half = len(measured) // 2
    return [
        *experiment_queries(table, lookback, measured[:half], trust, max_bytes=max_bytes),
        *experiment_queries(table, lookback, measured[half:], trust, max_bytes=max_bytes),
    ]


@dataclass(frozen=True)
class ArmRow:
    """One key's counts in one arm of one entry's experiment (a row of :func:`experiment_sql`)."""

    entry_id: str
    reporter_id: str
    arm: str
    ops: int = 0
    failures: int = 0
    sig_failures: int = 0
    followed: int = 0

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ArmRow:
        return cls(
            entry_id=str(row["entry_id"]),
            reporter_id=str(row["reporter_id"]),
            arm=str(row["arm"]),
            ops=int(row.get("ops") or 0),
            failures=int(row.get("failures") or 0),
            sig_failures=int(row.get("sig_failures") or 0),
            followed=int(row.get("followed") or 0),
        )


def _default(name: str) -> Any:
    return Settings.model_fields[name].default


@dataclass(frozen=True)
class Rules:
    """The experiment's settings (``playbook_*``)."""

    # the defaults are the settings' own (one place for configuration)
    min_units: int = _default("playbook_min_units")
    min_ops: int = _default("playbook_min_ops_to_judge")
    min_effect: float = _default("playbook_min_effect")
    z: float = _default("playbook_experiment_z")
    graduate_after: int = _default("playbook_graduate_after")
    holdout_new: float = _default("playbook_holdout_new")
    holdout_graduated: float = _default("playbook_holdout_graduated")

    @classmethod
    def from_settings(cls, settings: Settings) -> Rules:
        return cls(
            min_units=settings.playbook_min_units,
            min_ops=settings.playbook_min_ops_to_judge,
            min_effect=settings.playbook_min_effect,
            z=settings.playbook_experiment_z,
            graduate_after=settings.playbook_graduate_after,
            holdout_new=settings.playbook_holdout_new,
            holdout_graduated=settings.playbook_holdout_graduated,
        )


@dataclass
class Cell:
    """One arm of one entry: per key (ops, failures), and the totals."""

    keys: dict[str, tuple[int, int]] = field(default_factory=dict)
    sig_failures: int = 0
    followed: int = 0

    def add(self, row: ArmRow) -> None:
        ops, failures = self.keys.get(row.reporter_id, (0, 0))
        if row.ops:
            self.keys[row.reporter_id] = (ops + row.ops, failures + row.failures)
        self.sig_failures += row.sig_failures
        self.followed += row.followed

    @property
    def ops(self) -> int:
        return sum(n for n, _ in self.keys.values())

    @property
    def failures(self) -> int:
        return sum(x for _, x in self.keys.values())

    @property
    def units(self) -> int:
        return sum(1 for n, _ in self.keys.values() if n > 0)


def cells(rows: Iterable[ArmRow]) -> tuple[dict[str, dict[str, Cell]], int]:
    """Rows → {entry_id: {arm: Cell}}, and the crossed units dropped (counted once per key and entry)."""
    out: dict[str, dict[str, Cell]] = {}
    crossed: set[tuple[str, str]] = set()
    for row in rows:
        if row.arm not in _ARMS:
            crossed.add((row.entry_id, row.reporter_id))
            continue
        out.setdefault(row.entry_id, {arm: Cell() for arm in _ARMS})[row.arm].add(row)
    return out, len(crossed)


def _delta(holdout: Mapping[str, tuple[int, int]], treatment: Mapping[str, tuple[int, int]]) -> float | None:
    n_h, n_t = sum(n for n, _ in holdout.values()), sum(n for n, _ in treatment.values())
    if not n_h or not n_t:
        return None
    return sum(x for _, x in holdout.values()) / n_h - sum(x for _, x in treatment.values()) / n_t


def sign_survives(
    holdout: Mapping[str, tuple[int, int]], treatment: Mapping[str, tuple[int, int]], sign: int
) -> bool:
    """Whether Δ keeps ``sign`` (+1 helpful, −1 harmful) with any single key left out (of both arms,
    when a key counted in both)."""
    for key in {*holdout, *treatment}:
        delta = _delta(
            {k: v for k, v in holdout.items() if k != key}, {k: v for k, v in treatment.items() if k != key}
        )
        if delta is None or delta * sign <= 0:
            return False
    return True


def _round(value: float) -> float:
    return round(value, _DIGITS)


def judge(
    entry: PlaybookEntry,
    arms: Mapping[str, Cell] | None,
    *,
    rules: Rules,
    now: datetime,
    since: datetime | None = None,
) -> tuple[PlaybookEntry, Verdict]:
    """``entry`` with this run's arm tallies, intervals and (when due) its judgement applied, and
    the verdict (``insufficient`` when not judged). ``since`` is the start of the period the arms
    were counted over (:func:`experiment_since`): when the last judgement lies before it, every op
    counted is new. Pure."""
    treatment, holdout = (arms or {}).get("treatment") or Cell(), (arms or {}).get("holdout") or Cell()
    ops_t, ops_h = treatment.ops, holdout.ops
    x_t, x_h = treatment.failures, holdout.failures
    deff = max(
        design_effect([(float(n), float(x)) for n, x in treatment.keys.values()]),
        design_effect([(float(n), float(x)) for n, x in holdout.keys.values()]),
    )
    update: dict[str, Any] = {
        "treatment_units": treatment.units, "holdout_units": holdout.units,
        "treatment_ops": ops_t, "treatment_failures": x_t, "holdout_ops": ops_h, "holdout_failures": x_h,
        "treatment_sig_failures": treatment.sig_failures, "holdout_sig_failures": holdout.sig_failures,
        "followed_treatment": treatment.followed, "followed_holdout": holdout.followed,
        "design_effect": _round(deff), "efficacy_checked_at": now,
    }  # fmt: skip
    for name, x, n in (("treatment", x_t, ops_t), ("holdout", x_h, ops_h)):
        low, high = wilson(x / deff, n / deff, rules.z) if n else (None, None)
        update[f"{name}_rate"] = _round(x / n) if n else None
        update[f"{name}_rate_low"] = None if low is None else _round(low)
        update[f"{name}_rate_high"] = None if high is None else _round(high)
    if ops_t and ops_h:
        effect, low, high = newcombe(x_h / deff, ops_h / deff, x_t / deff, ops_t / deff, rules.z)
        update.update(effect=_round(effect), effect_low=_round(low), effect_high=_round(high))
    else:
        effect = low = high = 0.0
        update.update(effect=None, effect_low=None, effect_high=None)

    # new ops since the last judgement; a count above today's means the lookback moved past part of
    # it, and a judgement before the period counted none of today's ops (a sliding lookback under
    # steady traffic keeps the same count: without this the entry would never be judged again)
    fresh = since is not None and entry.judged_at is not None and entry.judged_at <= since
    judged_t, judged_h = (
        (None, None)
        if fresh
        else (
            None if entry.judged_treatment_ops is None else min(entry.judged_treatment_ops, ops_t),
            None if entry.judged_holdout_ops is None else min(entry.judged_holdout_ops, ops_h),
        )
    )
    update.update(judged_treatment_ops=judged_t, judged_holdout_ops=judged_h)
    enough = min(treatment.units, holdout.units) >= rules.min_units and min(ops_t, ops_h) >= rules.min_ops
    due = (judged_t is None or ops_t - judged_t >= rules.min_ops) and (
        judged_h is None or ops_h - judged_h >= rules.min_ops
    )
    if not (enough and due):
        return entry.model_copy(update=update), "insufficient"

    verdict: Verdict
    if low > 0:
        verdict = "helpful" if sign_survives(holdout.keys, treatment.keys, +1) else "undecided"
    elif high < 0:
        verdict = "harmful" if sign_survives(holdout.keys, treatment.keys, -1) else "undecided"
    elif -rules.min_effect < low and high < rules.min_effect:
        verdict = "no_effect"
    else:
        verdict = "undecided"
    streak = entry.helpful_streak + 1 if verdict == "helpful" else 0
    update.update(
        last_verdict=verdict, judged_at=now, judged_treatment_ops=ops_t, judged_holdout_ops=ops_h,
        helpful_streak=streak, helpful_count=entry.helpful_count + (verdict == "helpful"),
        harmful_count=entry.harmful_count + (verdict == "harmful"),
        neutral_count=entry.neutral_count + (verdict == "no_effect"), updated_at=now,
    )  # fmt: skip
    if verdict == "helpful" and streak >= rules.graduate_after and entry.experiment_stage != "graduated":
        update.update(experiment_stage="graduated", holdout_share=rules.holdout_graduated, graduated_at=now)
    elif verdict in ("harmful", "no_effect"):
        update.update(status="retired", retired_at=now, retired_reason=verdict)
    return entry.model_copy(update=update), verdict


@dataclass
class ExperimentResult:
    """Entries after :func:`apply_experiment`, and what this run decided."""

    entries: list[PlaybookEntry]
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    graduated: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    crossed: int = 0


def start_experiments(
    entries: Iterable[PlaybookEntry], *, rules: Rules, now: datetime
) -> list[PlaybookEntry]:
    """Active entries without an experiment start one now, withheld from ``holdout_new`` of the
    readers: entries that just became active, and those active before experiments existed
    (re-tested, not grandfathered)."""
    return [
        e.model_copy(update={"experiment_started_at": now, "holdout_share": rules.holdout_new})
        if e.status == "active" and e.experiment_started_at is None and e.experiment_stage == "new"
        else e
        for e in entries
    ]


def apply_experiment(
    entries: Iterable[PlaybookEntry],
    rows: Iterable[ArmRow],
    *,
    rules: Rules,
    now: datetime,
    lookback: Window | None = None,
) -> ExperimentResult:
    """Judge every measurable entry on its arms (rows of :func:`experiment_sql` for the same
    entries and ``lookback``); others pass unchanged. Pure."""
    by_entry, crossed = cells(rows)
    result = ExperimentResult(entries=[], crossed=crossed)
    for entry in entries:
        if measurable(entry):
            before = entry
            since = experiment_since(entry, lookback) if lookback is not None else None
            entry, verdict = judge(entry, by_entry.get(entry.entry_id), rules=rules, now=now, since=since)
            result.verdicts[entry.entry_id] = verdict
            if entry.experiment_stage == "graduated" and before.experiment_stage != "graduated":
                result.graduated.append(entry.entry_id)
            if entry.status == "retired":
                result.retired.append(entry.entry_id)
        result.entries.append(entry)
    return result
