"""The read-only guard of ``POST /sql``: one query over the allowed tables, with a row cap.

An agent's SQL is parsed with sqlglot (Athena's dialect) and accepted only when it is exactly
one statement whose root is a query (SELECT, WITH … SELECT, UNION/INTERSECT/EXCEPT) and every
table it reads is one of ``allowed_tables`` in the lake's Glue database. Everything else is
refused with a :class:`~opslake.errors.SqlRejectedError` (400) that says what is allowed: DDL,
DML, UNLOAD, MSCK, SHOW, EXPLAIN, CALL, DESCRIBE, PREPARE/EXECUTE, SET, external functions, more
than one statement, other databases and catalogs (``information_schema``, ``system``, …) and
table functions (``TABLE(…)``, ``sequence(…)`` as a row source, a bare ``FROM UNNEST(…)``).

CTE names are subtracted with Trino's scoping, not globally: a name refers to a CTE only inside
the query that defines it, after its definition (``WITH secret AS (SELECT * FROM secret)``
reads the real table ``secret`` in Athena, and is refused here).

What runs is the SQL regenerated from the checked tree (comments dropped), so Athena executes
exactly what was validated, with the outer LIMIT set to at most ``limit + 1`` so the caller can
tell whether rows were cut. sqlglot is pure Python (~160 ms to import): only ``/sql`` loads it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from opslake.errors import SqlError, SqlRejectedError

# A quoted string or name (quotes doubled inside), a comment, or one parenthesis.
_PAREN_TOKEN = re.compile(r"'(?:[^']|'')*+'?|\"(?:[^\"]|\"\")*+\"?|--[^\n]*|/\*.*?(?:\*/|\Z)|[()]", re.S)

# sqlglot warns on every statement it falls back to parsing as a generic command (SHOW, CALL, …):
# those are refused here with a clear message, so the warning is noise in the function's log.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

MAX_SQL_CHARS = 20_000
#: Deepest parenthesis nesting accepted: sqlglot's parser recurses a dozen frames per level and hits
#: Python's recursion limit near 50; real queries nest a handful of levels.
MAX_SQL_NESTING = 32
DEFAULT_CATALOG = "awsdatacatalog"

# Statements sqlglot parses into a dedicated node (everything it does not know is a Command).
_STATEMENT_NAMES: dict[type[exp.Expr], str] = {
    exp.Insert: "INSERT",
    exp.Delete: "DELETE",
    exp.Update: "UPDATE",
    exp.Merge: "MERGE",
    exp.Create: "CREATE",
    exp.Drop: "DROP",
    exp.Alter: "ALTER",
    exp.Describe: "DESCRIBE",
    exp.Set: "SET",
    exp.Use: "USE",
    exp.Values: "VALUES",
}


@dataclass(frozen=True)
class GuardedQuery:
    """A query that passed the guard: the SQL to run (row cap applied) and what it reads."""

    sql: str
    tables: tuple[str, ...]
    limit: int


def _allowed_text(allowed: Iterable[str]) -> str:
    return (
        "only one read-only query (SELECT, WITH … SELECT, UNION) over these tables is allowed: "
        + ", ".join(sorted(allowed))
    )


def _reject(reason: str, allowed: Iterable[str], *, code: str = "sql_rejected") -> SqlRejectedError:
    allowed = sorted(allowed)
    return SqlRejectedError(
        f"{reason}; {_allowed_text(allowed)}",
        code=code,
        detail={"reason": reason, "allowed_tables": allowed},
    )


def _statement_name(statement: exp.Expr) -> str:
    if isinstance(statement, exp.Command):
        name = str(statement.this).upper()
        return "USING EXTERNAL FUNCTION" if name == "USING" else name
    for kind, name in _STATEMENT_NAMES.items():
        if isinstance(statement, kind):
            return name
    return statement.key.upper()


def _with_of(node: exp.Expr) -> exp.With | None:
    found = node.args.get("with_") or node.args.get("with")
    return found if isinstance(found, exp.With) else None


def _visible_ctes(table: exp.Table) -> set[str]:
    """The CTE names an unqualified table reference can mean, with Trino's scoping: the CTEs of
    every enclosing query, but inside a WITH only those defined before (recursive: up to) the
    CTE the reference is in."""
    visible: set[str] = set()
    child: exp.Expr = table
    node = table.parent
    while node is not None:
        if isinstance(node, exp.With):
            ctes = list(node.expressions)
            index = next((i for i, cte in enumerate(ctes) if cte is child), len(ctes))
            upto = index + 1 if node.args.get("recursive") else index
            visible |= {cte.alias_or_name.lower() for cte in ctes[:upto]}
        elif isinstance(node, exp.Query):
            with_ = _with_of(node)
            if with_ is not None and child is not with_:
                visible |= {cte.alias_or_name.lower() for cte in with_.expressions}
        child, node = node, node.parent
    return visible


def _check_sources(tree: exp.Expr, allowed: set[str], database: str) -> list[str]:
    """Every table the query reads must be an allowed table of the lake's database."""
    read: list[str] = []
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if not name:
            raise _reject(f"table functions are not allowed ({table.sql('athena')[:80]})", allowed)
        catalog, db = table.catalog.lower(), table.db.lower()
        label = ".".join(p for p in (catalog, db, name) if p)
        if catalog and catalog != DEFAULT_CATALOG:
            raise _reject(f"catalog {catalog!r} is not allowed (only the lake's Glue catalog)", allowed)
        if db and db != database.lower():
            raise _reject(
                f"{label!r} is outside the lake's database {database!r} "
                "(information_schema, system and other databases cannot be read)",
                allowed,
            )
        if not db and name in _visible_ctes(table):
            continue
        if name not in allowed:
            raise _reject(f"table {label!r} is not allowed", allowed, code="sql_table_not_allowed")
        if name not in read:
            read.append(name)
    for source in tree.find_all(exp.From):
        if isinstance(source.this, exp.Unnest):
            raise _reject(
                "UNNEST may only expand a column of a table you read "
                "(… FROM t CROSS JOIN UNNEST(t.col) AS u(v)), not be the row source",
                allowed,
            )
    return read


def _row_count(node: exp.Expr | None) -> int | None:
    """The number of a LIMIT or FETCH written as a number literal, or None for anything else (ALL,
    NULL, a subquery, …, which the cap replaces); 400 for a number that is not whole (``LIMIT 1.5``,
    ``LIMIT 1e3``), which Athena refuses too."""
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    try:
        return int(node.this)
    except ValueError:
        raise SqlError(
            f"SYNTAX_ERROR: LIMIT and FETCH take a whole number of rows, not {str(node.this)[:40]!r}",
            code="sql_syntax_error",
            detail={"reason": "syntax"},
        ) from None


def _cap(tree: exp.Query, limit: int) -> exp.Query:
    """Set the root's LIMIT to at most ``limit + 1`` (a smaller literal LIMIT is kept)."""
    cap = limit + 1
    current = tree.args.get("limit")
    options = current.args.get("limit_options") if isinstance(current, (exp.Limit, exp.Fetch)) else None
    if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
        # a share of the rows, or every row tied with the last: neither bounds the rows read back
        raise SqlError(
            "SYNTAX_ERROR: LIMIT and FETCH take a number of rows here, without PERCENT or WITH TIES",
            code="sql_syntax_error",
            detail={"reason": "syntax"},
        )
    if isinstance(current, exp.Limit):
        count = _row_count(current.expression)
    elif isinstance(current, exp.Fetch):
        count = _row_count(current.args.get("count"))
    else:
        count = None
    if count is not None and count <= cap:
        return tree
    tree.set("limit", exp.Limit(expression=exp.Literal.number(cap)))
    return tree


def _syntax_message(exc: ParseError) -> str:
    """Where the SQL stops making sense, without sqlglot's internal class names."""
    first = exc.errors[0] if exc.errors else {}
    where = f"line {first.get('line')}:{first.get('col')}: " if first else ""
    description = str(first.get("description") or exc).split("\n", 1)[0]
    highlight = str(first.get("highlight") or "").strip()
    if (
        description.startswith(("Required keyword", "Expected table name but got <Token"))
        or "<class" in description
    ):
        description = "unexpected or incomplete input"
    return f"{where}{description}" + (f" at {highlight!r}" if highlight else "")


def _nesting(sql: str) -> int:
    """The deepest parenthesis nesting outside string literals and quoted names (a cheap pre-check)."""
    depth = deepest = 0
    for token in _PAREN_TOKEN.finditer(sql):
        char = token.group()
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
    return deepest


def _too_deep(allowed: Iterable[str]) -> SqlRejectedError:
    return _reject(
        f"the query nests too deeply (more than {MAX_SQL_NESTING} levels of parentheses or subqueries); "
        "flatten it with WITH clauses",
        allowed,
        code="sql_too_deep",
    )


def parse_one_query(sql: str, allowed: Iterable[str]) -> exp.Query:
    """The single query ``sql`` holds, or a 400 saying why it is not one."""
    allowed_set = {t.lower() for t in allowed}
    if not sql.strip():
        raise _reject("the SQL is empty", allowed_set)
    if len(sql) > MAX_SQL_CHARS:
        raise _reject(f"the SQL is {len(sql)} characters; at most {MAX_SQL_CHARS} are allowed", allowed_set)
    if _nesting(sql) > MAX_SQL_NESTING:
        raise _too_deep(allowed_set)
    try:
        statements = [s for s in sqlglot.parse(sql, read="athena") if s is not None]
    except RecursionError:  # deep nesting the pre-check does not see (e.g. long operator chains)
        raise _too_deep(allowed_set) from None
    except ParseError as exc:
        raise SqlError(
            f"SYNTAX_ERROR: {_syntax_message(exc)}", code="sql_syntax_error", detail={"reason": "syntax"}
        ) from exc
    except SqlglotError as exc:  # tokenizer errors (an unterminated string, …)
        raise SqlError(
            f"SYNTAX_ERROR: the SQL cannot be read ({str(exc).splitlines()[0][:200]})",
            code="sql_syntax_error",
            detail={"reason": "syntax"},
        ) from exc
    if len(statements) != 1:
        raise _reject(f"{len(statements)} statements were sent", allowed_set)
    (statement,) = statements
    while isinstance(statement, exp.Subquery) and not statement.alias:  # "(SELECT …)"
        statement = statement.this
    if not isinstance(statement, exp.Select | exp.SetOperation):
        raise _reject(f"{_statement_name(statement)} statements are not allowed", allowed_set)
    for node in statement.walk():
        if isinstance(node, exp.DDL | exp.DML | exp.Command):
            raise _reject(f"{_statement_name(node)} is not allowed inside a query", allowed_set)
    return statement


def guard(sql: str, *, allowed_tables: Iterable[str], database: str, limit: int) -> GuardedQuery:
    """Check ``sql`` and return the capped SQL to run, or raise a 400 that says what is allowed."""
    allowed = {t.lower() for t in allowed_tables}
    try:
        tree = parse_one_query(sql, allowed)
        tables = _check_sources(tree, allowed, database)
        capped = _cap(tree, limit)
        checked = capped.sql(dialect="athena", comments=False)
    except RecursionError:  # sqlglot walks and regenerates trees recursively too
        raise _too_deep(allowed) from None
    return GuardedQuery(sql=checked, tables=tuple(sorted(tables)), limit=limit)
