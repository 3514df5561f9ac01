"""A Glue view's SQL in the embedded engine: its tables qualified with the view's database, and
which partition columns it passes through unchanged, so that a query's ``dt``/``hour``
predicates on the view can prune the partitions of the table underneath.

Pushing ``dt = 'X'`` from ``SELECT … FROM v WHERE dt = 'X'`` into the table ``v`` reads is sound
when every row the view outputs with ``dt = 'X'`` comes only from base rows with ``dt = 'X'``:
the view is one SELECT over one table (no set operation, and no join but LEFT JOINs that look
values up in other tables), outputs the base column ``dt`` under its own name, and neither a
window function nor LIMIT/OFFSET mixes rows across partitions (a GROUP BY must group by ``dt``
itself). A LEFT JOIN keeps every row of its left side and only adds columns, so the left side's
``dt`` still selects the same base rows; the looked-up tables (:func:`joined_tables`) get no
pushdown. The outer query still filters the rows; the pushdown only chooses which files are read.
"""

from __future__ import annotations

import re
import sys

import sqlglot
from sqlglot import exp

from opslake.query.dialect import PARTITION_COLUMNS, Predicate

Places = tuple[tuple[Predicate, ...], ...]


#: sqlglot parses recursively; a view's SQL may nest ~60 regexp_replace calls (the failures view's
#: masking), deeper than Python's default limit allows (the dialect layer raises it the same way).
_MIN_RECURSION_LIMIT = 20_000


def _parse(sql: str) -> exp.Expr:
    if sys.getrecursionlimit() < _MIN_RECURSION_LIMIT:
        sys.setrecursionlimit(_MIN_RECURSION_LIMIT)
    return sqlglot.parse_one(sql, read="athena")


def _ctes(tree: exp.Expr) -> set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def qualify_tables(sql: str, database: str) -> str:
    """The view's SQL with its unqualified tables qualified by ``database`` (the view's own
    database, where Athena resolves them), in Athena's dialect; CTE names are left alone."""
    try:
        tree = _parse(sql)
    except sqlglot.errors.ParseError:
        return sql  # the dialect layer reports the syntax error in Athena's words
    ctes = _ctes(tree)
    for table in tree.find_all(exp.Table):
        if table.name and not table.db and table.name.lower() not in ctes:
            table.set("db", exp.to_identifier(database))
    return tree.sql(dialect="athena")


def passthrough_columns(sql: str) -> frozenset[str]:
    """The partition columns (``dt``, ``hour``) through which outer predicates may be pushed into
    the view's one base table (empty when the view's shape does not allow it). The SELECT may
    read the table through derived tables and CTEs (``FROM (SELECT … FROM ops) x``), each of the
    same shape: the failures view computes its template once in a subquery."""
    try:
        tree = _parse(sql)
    except sqlglot.errors.ParseError:
        return frozenset()
    if not isinstance(tree, exp.Select):
        return frozenset()
    with_ = tree.args.get("with_") or tree.args.get("with")
    ctes = {cte.alias_or_name.lower(): cte.this for cte in (with_.expressions if with_ is not None else [])}
    return _passed(tree, ctes, 0)


def joined_tables(sql: str) -> frozenset[tuple[str, str]]:
    """The tables the view's top SELECT joins (any kind of join), as (database or '', name), lower
    case: no partition predicate is pushed into them."""
    try:
        tree = _parse(sql)
    except sqlglot.errors.ParseError:
        return frozenset()
    if not isinstance(tree, exp.Select):
        return frozenset()
    return frozenset(
        (join.this.db.lower(), join.this.name.lower())
        for join in tree.args.get("joins") or []
        if isinstance(join.this, exp.Table)
    )


def _lookup(join: exp.Expr, ctes: dict[str, exp.Expr]) -> bool:
    """A LEFT [OUTER] JOIN of a plain table (no subquery, window or CTE): it keeps every left row."""
    table = join.this
    return (
        isinstance(join, exp.Join)
        and str(join.args.get("side") or "").upper() == "LEFT"
        and str(join.args.get("kind") or "OUTER").upper() == "OUTER"
        and isinstance(table, exp.Table)
        and bool(table.name)
        and (bool(table.db) or table.name.lower() not in ctes)
        and join.find(exp.Select, exp.Window) is None
    )


def _own_nodes(select: exp.Select) -> list[exp.Expr]:
    """The select's clauses except its FROM and WITH (whose selects are checked on their own)."""
    nodes: list[exp.Expr] = []
    for key, value in select.args.items():
        if key in ("from_", "from", "with_", "with"):
            continue
        for node in value if isinstance(value, list) else [value]:
            if isinstance(node, exp.Expr):
                nodes.append(node)
    return nodes


def _passed(select: exp.Expr, ctes: dict[str, exp.Expr], depth: int) -> frozenset[str]:
    if not isinstance(select, exp.Select) or depth > 16:
        return frozenset()
    joins = select.args.get("joins") or []
    if select.args.get("limit") or select.args.get("offset") or not all(_lookup(j, ctes) for j in joins):
        return frozenset()
    if select.args.get("with_") is not None and depth > 0:
        return frozenset()
    from_ = select.args.get("from_") or select.args.get("from")
    source = from_.this if from_ is not None else None
    if isinstance(source, exp.Table) and source.name and not source.db and source.name.lower() in ctes:
        below = _passed(ctes[source.name.lower()], ctes, depth + 1)
    elif isinstance(source, exp.Table) and source.name:
        below = frozenset(PARTITION_COLUMNS)
    elif isinstance(source, exp.Subquery):
        below = _passed(source.this, ctes, depth + 1)
    else:
        return frozenset()
    # with lookups, only the left side's own columns pass (a looked-up table might have a dt too)
    left = source.alias_or_name.lower() if joins else None
    own = _own_nodes(select)
    # a window mixes rows across partitions; a subquery (IN, scalar) could read other partitions
    if any(node.find(exp.Window, exp.Select) is not None for node in own):
        return frozenset()
    group = select.args.get("group")
    grouped = (
        {e.name.lower() for e in group.expressions if isinstance(e, exp.Column)}
        if group is not None
        else None
    )
    if grouped is None and any(node.find(exp.AggFunc) is not None for node in own):
        return frozenset()
    passed: set[str] = set()
    for projection in select.expressions:
        if isinstance(projection, exp.Star) or (
            isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
        ):
            if left is None or (isinstance(projection, exp.Column) and projection.table.lower() == left):
                passed.update(PARTITION_COLUMNS)
            continue
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        if (
            isinstance(inner, exp.Column)
            and inner.name.lower() in PARTITION_COLUMNS
            and projection.alias_or_name.lower() == inner.name.lower()
            and (left is None or inner.table.lower() == left)
        ):
            passed.add(inner.name.lower())
    if grouped is not None:
        passed &= grouped
    return frozenset(passed) & below


def push_down(outer: Places, inner: Places, columns: frozenset[str]) -> Places:
    """The base table's partition predicates for one view read: the view's own (``inner``), each
    ANDed with every place the outer query reads the view (``outer``), restricted to the passed-
    through ``columns``; ``inner`` alone when nothing passes through."""
    if not columns:
        return inner
    combined: list[tuple[Predicate, ...]] = []
    for conjunction in inner or ((),):
        for place in outer or ((),):
            merged = conjunction + tuple(p for p in place if p.column in columns and p not in conjunction)
            if merged not in combined:
                combined.append(merged)
    return tuple(combined)


_INTEGERS = ("tinyint", "smallint", "integer", "bigint")


def _normal(kind: str) -> str:
    text = kind.strip().lower().replace(", ", ",")
    text = re.sub(r"varchar\(\d+\)", "varchar", text)
    return re.sub(r"timestamp\(\d\)", "timestamp", text)


def coercible(actual: str, declared: str) -> bool:
    """Whether a view query's column type may be stored as the view's declared type (Trino's
    implicit coercions that matter here: a narrower integer, real to double, an integer to a
    floating type, NULL to anything, bounded to unbounded varchar, any timestamp precision)."""
    actual, declared = _normal(actual), _normal(declared)
    if actual == declared or actual == "unknown":
        return True
    if actual in _INTEGERS and declared in _INTEGERS:
        return _INTEGERS.index(actual) <= _INTEGERS.index(declared)
    return (actual in _INTEGERS or actual == "real") and declared in ("real", "double")


def stale_view_message(
    view: str, declared: list[tuple[str, str]], actual: list[tuple[str, str]]
) -> str | None:
    """Athena's refusal of a view whose stored columns no longer match its query (Trino checks
    this on every read), or ``None`` when they match."""
    prefix = f"VIEW_IS_STALE: line 1:1: View '{view}' is stale or in invalid state"
    if len(declared) != len(actual):
        return (
            f"{prefix}: stored view column count ({len(declared)}) does not match column count "
            f"derived from the view query analysis ({len(actual)})"
        )
    for position, ((name, kind), (got_name, got_kind)) in enumerate(zip(declared, actual, strict=True)):
        if name.lower() != got_name.lower() or not coercible(got_kind, kind):
            return (
                f"{prefix}: column [{got_name}] of type {got_kind} projected from query view at position "
                f"{position} cannot be coerced to column [{name}] of type {kind} stored in view definition"
            )
    return None
