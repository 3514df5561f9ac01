"""Athena SQL → DuckDB SQL with Athena's answers, or a refusal that names the difference.

Pure (no I/O). sqlglot transpiles most of Athena's dialect to DuckDB faithfully; this module
fixes the places where the two would silently answer differently (measured on DuckDB 2.0):

* ``a / b``: Athena truncates toward zero when both operands are integers (``7/2`` = 3,
  ``-7/2`` = -3) and divides really otherwise. DuckDB's ``//`` does exactly that for every
  numeric type (integer → truncating integer division; double/decimal → real division), so
  every ``/`` becomes ``//``: no type inference needed. (Decimal ÷ decimal comes back as
  ``double`` rather than ``decimal``; a double divided by zero fails instead of giving Infinity.)
* ``try_cast(x AS <integer type>)``: DuckDB rounds '3.5' to 4 and accepts '1e3', '0x10', '1_000';
  Athena gives NULL. When ``x`` is a string (checked at run time with ``typeof``, which DuckDB
  folds to a constant) it is cast only if it is an optionally signed run of digits.
  ``CAST(x AS <integer type>)`` of such a string fails like Athena's instead of rounding.
* ``regexp_extract`` with no match: Athena NULL, DuckDB ''. Rewritten to
  ``CASE WHEN regexp_matches(s, p) THEN regexp_extract(s, p, g) END``: a real empty match still
  gives '' (a group that did not take part in the match gives '' where Athena gives NULL).
* ``regexp_replace(s, p, r)``: Trino writes group references in ``r`` as ``$1`` (``\\$`` a literal
  dollar, ``\\x`` a literal ``x``) and replaces every match; DuckDB (RE2) takes ``\\1`` (``\\\\`` a
  literal backslash) and replaces the first match unless given the ``'g'`` option. The
  replacement is translated (a literal only; ``${name}`` and a non-literal replacement are
  refused) and ``'g'`` is always passed.
* ``date_diff(unit, a, b)``: Athena counts whole units elapsed, DuckDB's ``date_diff`` counts
  unit boundaries crossed (10:59 → 11:01 is 0 hours in Athena, 1 in DuckDB): → ``date_sub``.
* ``TIMESTAMP '… .5'``: sqlglot writes ``CAST(… AS TIMESTAMP(0))``, which DuckDB reads as a
  seconds-precision TIMESTAMP_S (rounding to the second): precision is dropped (microseconds).
* Unnamed result columns are named ``_col0``, ``_col1``, … as Athena names them.

Refused (:class:`UnsupportedSqlError`): ``format_datetime`` (Joda patterns; use
``date_format``), ``format`` (Java patterns), ``map_agg``, ``histogram``, ``map_union``, anything
that is not a single query. A function Athena does not have (DuckDB's own, such as ``printf``,
``list_resize`` or ``getenv``) fails with ``FUNCTION_NOT_FOUND`` as in Athena
(:mod:`opslake.query.functions`).

Known remaining differences, not rewritten: ``map['missing']`` is NULL (Athena fails the
query; ``element_at`` is NULL in both); ``json_extract_scalar`` fails on invalid JSON (Athena
NULL); ``approx_percentile`` is an approximation in both engines with different algorithms;
comparing a varchar with a number is implicitly cast (Athena refuses the query).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from opslake.query.base import QueryFailedError, UnsupportedSqlError
from opslake.query.functions import TRINO_FUNCTIONS

PARTITION_COLUMNS = ("dt", "hour")
_INTEGER_TYPES = {exp.DType.TINYINT, exp.DType.SMALLINT, exp.DType.INT, exp.DType.BIGINT}
_INTEGER_PATTERN = r"\s*[+-]?[0-9]+\s*"
_REJECTED_FUNCTIONS: dict[str, str] = {
    "format_datetime": "it takes Joda-Time patterns DuckDB does not implement; use date_format "
    "with MySQL-style specifiers (e.g. date_format(ts, '%Y-%m-%d %H:%i'))",
    "map_agg": "DuckDB has no equivalent aggregate with Athena's duplicate-key semantics",
    "map_union": "DuckDB has no equivalent aggregate",
    "histogram": "DuckDB's histogram returns a differently typed map",
}


@dataclass(frozen=True)
class TableRef:
    """A table the query reads: ``database`` is None when the SQL does not qualify it."""

    database: str | None
    name: str


@dataclass(frozen=True)
class Predicate:
    """``column op values`` over a partition key with string literals: op is one of
    ``=``, ``in``, ``<``, ``<=``, ``>``, ``>=`` (BETWEEN becomes ``>=`` and ``<=``)."""

    column: str
    op: str
    values: tuple[str, ...]

    def holds(self, value: str) -> bool:
        if self.op in ("=", "in"):
            return value in self.values
        (bound,) = self.values
        return {
            "<": value < bound,
            "<=": value <= bound,
            ">": value > bound,
            ">=": value >= bound,
        }[self.op]


@dataclass(frozen=True)
class TranspiledQuery:
    """The DuckDB SQL plus what the engine needs to load: tables, and per table the partition
    predicates of each place it is read (OR across places, AND within one; an empty tuple
    means that place needs every partition)."""

    sql: str
    tables: list[TableRef]
    predicates: dict[TableRef, tuple[tuple[Predicate, ...], ...]] = field(default_factory=dict)

    def keeps(self, table: TableRef, partition: Mapping[str, str]) -> bool:
        """Whether a partition (key → value) may hold rows the query reads from ``table``."""
        places = self.predicates.get(table)
        if not places:
            return True
        return any(
            all(p.holds(partition[p.column]) for p in conjunction if p.column in partition)
            for conjunction in places
        )


# -- parsing -----------------------------------------------------------------------------------
_MIN_RECURSION_LIMIT = 20_000  # sqlglot recurses per nesting level: masking SQL nests ~60 calls


def _parse(sql: str) -> exp.Expr:
    if sys.getrecursionlimit() < _MIN_RECURSION_LIMIT:
        sys.setrecursionlimit(_MIN_RECURSION_LIMIT)
    try:
        statements = [s for s in sqlglot.parse(sql, read="athena") if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f"line {first.get('line')}:{first.get('col')}: " if first else ""
        raise QueryFailedError(f"SYNTAX_ERROR: {where}{first.get('description', exc)}") from exc
    if len(statements) != 1:
        raise UnsupportedSqlError(f"expected exactly one statement, got {len(statements)}")
    (statement,) = statements
    if not isinstance(statement, exp.Query):
        kind = statement.key.upper() if not isinstance(statement, exp.Command) else str(statement.this)
        raise UnsupportedSqlError(f"{kind} is not supported: the embedded engine runs read-only queries")
    return statement


def _check_functions(tree: exp.Expr) -> None:
    """Refuse, as Athena does, a call to a function Athena does not have. sqlglot models Athena's
    common functions as their own node types; anything else it parses as a generic call, which
    DuckDB would run if it has a function by that name (hundreds Athena lacks, some of which
    read the environment or build gigabytes in one uninterruptible call)."""
    for call in tree.find_all(exp.Anonymous):
        name = call.name.lower()
        if name not in TRINO_FUNCTIONS:
            raise QueryFailedError(f"FUNCTION_NOT_FOUND: Function '{name}' not registered")


def _cte_names(tree: exp.Expr) -> set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def _is_real_table(table: exp.Table, ctes: set[str]) -> bool:
    if not table.name:  # table functions appear as nameless tables
        return False
    return bool(table.db) or table.name.lower() not in ctes


def _ref(table: exp.Table) -> TableRef:
    return TableRef(table.db.lower() or None, table.name.lower())


# -- rewrites ----------------------------------------------------------------------------------
def _call(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=list(args))


def _integer_string_check(value: exp.Expr) -> exp.Expr:
    """TRUE when ``value`` is not a string or is a string Athena would cast to an integer."""
    text = exp.Cast(this=value.copy(), to=exp.DataType.build("VARCHAR"))
    return exp.or_(
        exp.NEQ(this=_call("typeof", value.copy()), expression=exp.Literal.string("VARCHAR")),
        _call("regexp_full_match", text, exp.Literal.string(_INTEGER_PATTERN)),
    )


def _group_count(pattern: str) -> int:
    """Capturing groups in a regex: ``(`` not escaped, not in a class, not followed by ``?``."""
    count, i, in_class = 0, 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":  # "[]...]": a leading "]" is a member
                i += 1
        elif char == "(" and pattern[i + 1 : i + 2] != "?":
            count += 1
        i += 1
    return count


def trino_replacement_to_re2(replacement: str, groups: int | None) -> str:
    """A Trino ``regexp_replace`` replacement (``$n`` groups, ``\\`` escapes the next character) as
    RE2's (``\\n`` groups, ``\\\\`` a literal backslash). Trino reads as many digits after ``$`` as
    name an existing group; RE2 reads one, so a digit after a one-digit reference is only
    unambiguous when the pattern has fewer than 10 groups (``groups``; None: unknown)."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\":
            if i + 1 >= len(replacement):
                raise QueryFailedError("INVALID_FUNCTION_ARGUMENT: Illegal escape in replacement")
            literal = replacement[i + 1]
            out.append("\\\\" if literal == "\\" else literal)
            i += 2
        elif char == "$":
            digit = replacement[i + 1 : i + 2]
            if not digit.isascii() or not digit.isdigit():
                raise UnsupportedSqlError(
                    "regexp_replace: only $0..$9 group references are supported by the embedded engine"
                )
            follows = replacement[i + 2 : i + 3]
            if follows.isascii() and follows.isdigit() and (groups is None or groups >= 10):
                raise UnsupportedSqlError("regexp_replace: a group reference of more than one digit")
            if groups is not None and int(digit) > groups:
                raise QueryFailedError("INVALID_FUNCTION_ARGUMENT: Illegal group reference")
            out.append("\\" + digit)
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _rewrite(node: exp.Expr) -> exp.Expr | None:
    """The replacement of one node (children already rewritten), or None to keep it."""
    if isinstance(node, exp.Anonymous) and node.name.lower() in _REJECTED_FUNCTIONS:
        name = node.name.lower()
        raise UnsupportedSqlError(
            f"{name} is not supported by the embedded engine: {_REJECTED_FUNCTIONS[name]}"
        )
    if isinstance(node, exp.Format):
        # Athena's format() takes Java patterns (%s, %05d); sqlglot writes DuckDB's format(), which
        # takes {} patterns: the answer would differ, and DuckDB's widths build any size of string.
        raise UnsupportedSqlError(
            "format is not supported by the embedded engine: its patterns differ from Athena's; "
            "use concat or || (and lpad for padding)"
        )
    if isinstance(node, exp.RegexpReplace):
        replacement = node.args.get("replacement")
        if replacement is None:
            return None  # regexp_replace(s, p): removes every match (sqlglot passes '' and 'g')
        if not (isinstance(replacement, exp.Literal) and replacement.is_string):
            raise UnsupportedSqlError("regexp_replace: the embedded engine needs a literal replacement")
        pattern = node.expression
        groups = (
            _group_count(pattern.this) if isinstance(pattern, exp.Literal) and pattern.is_string else None
        )
        translated = node.copy()
        translated.set("replacement", exp.Literal.string(trino_replacement_to_re2(replacement.this, groups)))
        translated.set("modifiers", exp.Literal.string("g"))
        return translated
    if isinstance(node, exp.Div):
        return exp.IntDiv(this=node.this, expression=node.expression)
    if isinstance(node, exp.Cast) and node.to.this in _INTEGER_TYPES:
        value = node.this
        if isinstance(value, exp.Literal) and not value.is_string:
            return None
        check = _integer_string_check(value)
        if isinstance(node, exp.TryCast) or node.args.get("safe"):
            return exp.Case(ifs=[exp.If(this=check, true=node.copy())])
        message = exp.DPipe(
            this=exp.DPipe(
                this=exp.Literal.string("INVALID_CAST_ARGUMENT: Cannot cast '"),
                expression=exp.Cast(this=value.copy(), to=exp.DataType.build("VARCHAR")),
            ),
            expression=exp.Literal.string(f"' to {node.to.sql('athena').upper()}"),
        )
        return exp.Case(
            ifs=[exp.If(this=exp.Not(this=exp.paren(check)), true=_call("error", message))],
            default=node.copy(),
        )
    if isinstance(node, exp.RegexpExtract):
        matches = _call("regexp_matches", node.this.copy(), node.expression.copy())
        return exp.Case(ifs=[exp.If(this=matches, true=node.copy())])
    if isinstance(node, exp.DateDiff):
        unit = node.args.get("unit")
        unit_name = unit.name if unit is not None else "day"
        return _call(
            "date_sub", exp.Literal.string(unit_name.lower()), node.expression.copy(), node.this.copy()
        )
    if isinstance(node, exp.DataType) and node.this == exp.DType.TIMESTAMP and node.expressions:
        return exp.DataType.build("TIMESTAMP")
    return None


def _rewrite_tree(tree: exp.Expr) -> exp.Expr:
    """Rewrite deepest nodes first, so every replacement is built from rewritten children."""
    for node in reversed(list(tree.walk(bfs=True))):
        replacement = _rewrite(node)
        if replacement is not None:
            if node is tree:
                tree = replacement
            else:
                node.replace(replacement)
    return tree


def _name_outputs(tree: exp.Expr) -> None:
    """Athena names an unaliased, non-column output ``_col<i>`` (DuckDB would use its text)."""
    select = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    if not isinstance(select, exp.Select):
        return
    for i, projection in enumerate(select.expressions):
        if not isinstance(projection, exp.Alias | exp.Column | exp.Star) and not (
            isinstance(projection, exp.Dot) and isinstance(projection.expression, exp.Star)
        ):
            projection.replace(exp.alias_(projection.copy(), f"_col{i}"))


# -- partition predicates ----------------------------------------------------------------------
def _string_literal(node: exp.Expr) -> str | None:
    return node.this if isinstance(node, exp.Literal) and node.is_string else None


_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}
_COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}


def _predicates_of(conjunct: exp.Expr) -> list[tuple[exp.Column, Predicate]]:
    """The partition predicates one WHERE conjunct states, with the column each is on."""
    if type(conjunct) in _COMPARISONS:
        op = _COMPARISONS[type(conjunct)]
        left, right = conjunct.this, conjunct.expression
        if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            left, right, op = right, left, _FLIPPED[op]
        value = _string_literal(right)
        if isinstance(left, exp.Column) and left.name.lower() in PARTITION_COLUMNS and value is not None:
            return [(left, Predicate(left.name.lower(), op, (value,)))]
    if (
        isinstance(conjunct, exp.In)
        and isinstance(conjunct.this, exp.Column)
        and not conjunct.args.get("query")
    ):
        column = conjunct.this
        values = [_string_literal(v) for v in conjunct.expressions]
        if column.name.lower() in PARTITION_COLUMNS and values and all(v is not None for v in values):
            return [(column, Predicate(column.name.lower(), "in", tuple(v for v in values if v is not None)))]
    if isinstance(conjunct, exp.Between) and isinstance(conjunct.this, exp.Column):
        column = conjunct.this
        low, high = _string_literal(conjunct.args["low"]), _string_literal(conjunct.args["high"])
        if column.name.lower() in PARTITION_COLUMNS and low is not None and high is not None:
            name = column.name.lower()
            return [(column, Predicate(name, ">=", (low,))), (column, Predicate(name, "<=", (high,)))]
    return []


def _conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    return [condition]


def _select_sources(select: exp.Select) -> list[exp.Expr]:
    from_ = select.args.get("from_") or select.args.get("from")
    sources = [from_.this] if from_ is not None else []
    sources += [join.this for join in select.args.get("joins") or []]
    return sources


def _collect_predicates(tree: exp.Expr, ctes: set[str]) -> dict[TableRef, tuple[tuple[Predicate, ...], ...]]:
    places: dict[TableRef, list[tuple[Predicate, ...]]] = {}
    seen: set[int] = set()
    for select in tree.find_all(exp.Select):
        sources = _select_sources(select)
        tables = [s for s in sources if isinstance(s, exp.Table) and _is_real_table(s, ctes)]
        by_alias = {t.alias_or_name.lower(): t for t in tables}
        found: dict[int, list[Predicate]] = {id(t): [] for t in tables}
        where = select.args.get("where")
        if where is not None:
            for conjunct in _conjuncts(where.this):
                for column, predicate in _predicates_of(conjunct):
                    if column.table:
                        target = by_alias.get(column.table.lower())
                    else:  # unqualified: only unambiguous when the select reads one table
                        target = tables[0] if len(sources) == 1 and len(tables) == 1 else None
                    if target is not None:
                        found[id(target)].append(predicate)
        for table in tables:
            seen.add(id(table))
            places.setdefault(_ref(table), []).append(tuple(found[id(table)]))
    for table in tree.find_all(exp.Table):  # read somewhere other than a FROM/JOIN: no pruning
        if _is_real_table(table, ctes) and id(table) not in seen:
            places.setdefault(_ref(table), []).append(())
    return {ref: tuple(conjunctions) for ref, conjunctions in places.items()}


# -- entry point -------------------------------------------------------------------------------
def to_duckdb(sql: str) -> TranspiledQuery:
    """Transpile one Athena query; raise UnsupportedSqlError for what would answer differently."""
    tree = _parse(sql)
    _check_functions(tree)
    ctes = _cte_names(tree)
    tables: list[TableRef] = []
    for table in tree.find_all(exp.Table):
        if _is_real_table(table, ctes):
            ref = _ref(table)
            if ref not in tables:
                tables.append(ref)
            if table.catalog:  # awsdatacatalog.db.table: DuckDB knows only db.table
                table.set("catalog", None)
    predicates = _collect_predicates(tree, ctes)
    tree = _rewrite_tree(tree)
    _name_outputs(tree)
    return TranspiledQuery(sql=tree.sql(dialect="duckdb"), tables=tables, predicates=predicates)


def partition_filter(
    query: TranspiledQuery, table: TableRef, partitions: Sequence[Mapping[str, str]]
) -> list[Mapping[str, str]]:
    """The partitions of ``table`` the query may read (helper for engines and tests)."""
    return [p for p in partitions if query.keeps(table, p)]
