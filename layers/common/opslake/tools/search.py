"""``POST /search``: ranked full-text search over the datasets' text columns and the active playbook.

Two steps. The query engine (Athena on AWS, the embedded DuckDB locally) pre-filters candidates:
one ``UNION ALL`` query, one branch per searched table, each keeping at most
:data:`CANDIDATES_PER_SOURCE` rows that hold a query term at the start of a word, those with the
most distinct terms first. Only the query's *terms* reach SQL (tokenized, lower-cased, deduplicated,
at most :data:`MAX_TERMS`, made of letters, digits and dots), each a ``regexp_like`` pattern
(:func:`word_start_pattern`, a ``.`` written ``\\.``) in a string literal with
its quotes doubled (:func:`opslake.query.sqltext.sql_string`); the raw query text never does.
Active playbook entries (the snapshot ``GET /playbooks`` serves) are pre-filtered the same way in
Python. Then BM25 (:mod:`opslake.tools.bm25`) ranks every candidate together, so scores compare
across sources. The entries the caller (its API key name) is held out from by the playbook holdout
experiments are not searched at all: search must not be a door around the experiment.

Searched tables: the dataset tables of the allowlist ``POST /sql`` uses (``settings.allowed_tables``)
that this module knows the text columns of. ``/sql``'s allowlist also holds ``ops``, but search does
not read it: op records are agents' request and error text, and a scan of the partitioned lake with
no ``dt``/``hour`` filter would grow with its history (``/sql`` is the tool for them).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from opslake.datasets.staffing import PLACEMENTS, WORKERS
from opslake.errors import BadRequestError
from opslake.http.bodies import parse_body
from opslake.models.playbooks import HOLDOUT_SALT, PlaybookEntry
from opslake.query.api import ApiQueryConfig, run_query
from opslake.query.base import QueryEngine
from opslake.query.sqltext import sql_string
from opslake.tools import bm25
from opslake.tools.playbook_arms import visible_entries

MAX_QUERY_CHARS = 200
MAX_TERMS = 10
MAX_RESULTS = 50
#: How many rows (or playbook entries) each source may hand to the ranking.
CANDIDATES_PER_SOURCE = 300
PLAYBOOKS = "playbooks"
_TEXT_CHARS = 300

Source = Literal["workers", "placements", "playbooks"]


@dataclass(frozen=True)
class SearchTable:
    """A searchable table: its row key and its text columns (array columns joined with ``, ``)."""

    name: str
    key: str
    columns: tuple[str, ...]
    arrays: tuple[str, ...] = ()

    def column_sql(self, column: str) -> str:
        value = f"array_join({column}, ', ')" if column in self.arrays else f"CAST({column} AS varchar)"
        return f"coalesce({value}, '')"

    def text_sql(self) -> str:
        """The row's text as one string, the columns separated by `` | ``."""
        return " || ' | ' || ".join(self.column_sql(c) for c in self.columns)


SEARCH_TABLES: dict[str, SearchTable] = {
    WORKERS: SearchTable(
        WORKERS,
        "worker_id",
        ("worker_id", "name", "role", "city", "state", "skills", "certifications", "availability"),
        arrays=("skills", "certifications"),
    ),
    PLACEMENTS: SearchTable(
        PLACEMENTS, "placement_id", ("placement_id", "worker_id", "client", "role", "city", "state", "status")
    ),
}


class SearchRequest(BaseModel):
    """The body of ``POST /search``."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    q: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_QUERY_CHARS,
            description="words to look for, e.g. 'tig welder houston' (at most 10 distinct terms are used)",
        ),
    ]
    # strict: a JSON true (or "5") is not a count; lax mode read true as limit 1
    limit: Annotated[int, Field(ge=1, le=MAX_RESULTS, strict=True, description="most results to return")] = 10
    sources: Annotated[
        list[Source] | None,
        Field(min_length=1, max_length=3, description="where to search (default: every source)"),
    ] = None


class SearchResult(BaseModel):
    source: str = Field(description="table/key=value of a row, or playbooks/entry_id=… of an entry")
    table: str
    key: str
    score: float = Field(description="BM25 score; comparable within one answer only")
    matched_terms: list[str] = Field(description="the query's words found in the text (compared stemmed)")
    text: str


class SearchAnswer(BaseModel):
    results: list[SearchResult]
    terms: list[str] = Field(description="the query's words that were searched (stopwords dropped)")
    ignored_terms: list[str] = Field(description=f"words beyond the first {MAX_TERMS} distinct terms")
    sources: list[str]
    candidates: dict[str, int] = Field(description="candidates each source passed to the ranking")
    searched_rows: int = Field(description="rows and entries the terms were looked for in (BM25's N)")
    candidate_limit: int
    returned: int
    engine: str | None


def parse_search_request(body: str | None) -> SearchRequest:
    """The body as a :class:`SearchRequest`; a 400 naming each bad field otherwise (``q`` empty or
    over 200 characters, ``limit`` out of 1-50, an unknown source)."""
    return parse_body(SearchRequest, body)


def searchable_sources(allowed_tables: Iterable[str]) -> list[str]:
    """The sources a search may read: allowlisted tables with known text columns, then playbooks."""
    return [t for t in SEARCH_TABLES if t in set(allowed_tables)] + [PLAYBOOKS]


def check_search_request(
    request: SearchRequest, available: Sequence[str]
) -> tuple[list[str], list[str], list[str]]:
    """(the sources to search, the query terms, the terms beyond :data:`MAX_TERMS`); 400s say why."""
    wanted = list(dict.fromkeys(request.sources or available))
    unavailable = [s for s in wanted if s not in available]
    if unavailable:
        raise BadRequestError(
            f"source(s) {', '.join(unavailable)} cannot be searched here; available sources: {', '.join(available)}",
            detail={"field": "sources", "unavailable": unavailable, "available": list(available)},
        )
    terms, ignored = bm25.query_terms(request.q, MAX_TERMS)
    if not terms:
        raise BadRequestError(
            "q has no searchable term: give at least one word of two or more letters or digits that is "
            "not a stopword, e.g. 'tig welder houston'",
            detail={"field": "q"},
        )
    return wanted, terms, ignored


def needle(term: str) -> str:
    """What a row's lower-cased text must contain for ``term`` to be in it: the term itself, except
    that the stemmer's ``-ies`` → ``-y`` is undone to the shared prefix (``supply`` from ``supplies``)."""
    return term[:-1] if len(term) > 3 and term.endswith("y") else term


def word_start_pattern(term: str) -> str:
    """A regular expression matching ``term``'s :func:`needle` at the start of a word, read alike by
    Athena (Java syntax) and DuckDB (RE2): ``al`` finds the state ``AL`` but not ``Dallas``. A bare
    substring test let rows holding the needle inside other words fill the candidate bound and crowd
    out the rows that hold the word. Letters, digits and spaces stand for themselves and ASCII
    punctuation (a term's ``.``) is backslash-escaped, which all three regex engines read as the
    character itself; anything else cannot come from the tokenizer and is refused."""
    body = []
    for c in needle(term):
        if c.isalnum() or c == " ":
            body.append(c)
        elif c in string.punctuation:
            body.append("\\" + c)
        else:
            raise ValueError(f"not a search term: {term!r}")
    return "(^|[^\\p{L}\\p{N}])" + "".join(body)


#: The same test in Python, for playbook entries: the needle not preceded by a letter or digit.
def _word_start(term: str) -> re.Pattern[str]:
    return re.compile(r"(?<![^\W_])" + re.escape(needle(term)))


def prefilter_sql(config: ApiQueryConfig, tables: Sequence[str], terms: Sequence[str]) -> str:
    """One query, two branches per table, columns ``src, row_key, doc, hits, df_0 … df_{n-1}``:

    - the candidates: up to :data:`CANDIDATES_PER_SOURCE` rows with a key whose text holds a term
      (:func:`word_start_pattern`), the rows with the most distinct terms first (then by key);
      ``df_i`` is 1 where term ``i`` is in the row;
    - one statistics row (``row_key`` NULL): ``hits`` is the table's row count and ``df_i`` how many
      rows contain term ``i``, the collection statistics BM25's idf needs (see :mod:`.bm25`).

    Each table's text is flagged once, in a ``WITH`` query both branches read (Athena inlines a
    ``WITH`` query, so it scans the table's text columns twice).
    """
    if not terms:
        raise ValueError("a prefilter needs at least one term")
    flagged, branches = [], []
    columns = [f"df_{i}" for i in range(len(terms))]
    hits = " + ".join(columns)
    for name in tables:
        table = SEARCH_TABLES[name]
        ApiQueryConfig(database=config.database, table=name)  # checks the identifier
        flags = ", ".join(
            f"CASE WHEN regexp_like(lower(doc), {sql_string(word_start_pattern(t))}) THEN 1 ELSE 0 END AS {c}"
            for t, c in zip(terms, columns, strict=True)
        )
        flagged.append(
            f"flags_{name} AS (\n  SELECT src, row_key, doc, {flags}\n"
            f"  FROM (SELECT {sql_string(name)} AS src, CAST({table.key} AS varchar) AS row_key, "
            f'{table.text_sql()} AS doc\n        FROM "{config.database}"."{name}") AS rows_{name}\n)'
        )
        branches.append(
            f"SELECT * FROM (\n  SELECT src, row_key, doc, {hits} AS hits, {', '.join(columns)}\n"
            f"  FROM flags_{name}\n  WHERE {hits} > 0 AND row_key IS NOT NULL\n  ORDER BY hits DESC, row_key\n"
            f"  LIMIT {CANDIDATES_PER_SOURCE}\n) AS candidates_{name}"
        )
        totals = ", ".join(f"coalesce(sum({c}), 0) AS {c}" for c in columns)
        branches.append(
            f"SELECT {sql_string(name)} AS src, CAST(NULL AS varchar) AS row_key, CAST(NULL AS varchar) AS doc, "
            f"count(*) AS hits, {totals}\nFROM flags_{name}"
        )
    return "WITH " + ",\n".join(flagged) + "\n" + "\nUNION ALL\n".join(branches)


def _entry_text(entry: PlaybookEntry) -> str:
    return " | ".join(
        str(v) for v in (entry.trigger, entry.action, entry.domain, entry.endpoint, entry.task_class) if v
    )


def playbook_candidates(
    entries: Iterable[PlaybookEntry], terms: Sequence[str]
) -> tuple[list[PlaybookEntry], bm25.CorpusStats]:
    """Active entries whose text contains a term, picked as the SQL prefilter picks rows (bounded the
    same), and the statistics of every active entry."""
    needles = [_word_start(t) for t in terms]
    df = dict.fromkeys(terms, 0)
    total = 0
    scored = []
    for entry in entries:
        if entry.status != "active":
            continue
        total += 1
        text = bm25.fold(_entry_text(entry))
        found = [t for t, n in zip(terms, needles, strict=True) if n.search(text)]
        for term in found:
            df[term] += 1
        if found:
            scored.append((-len(found), entry.entry_id, entry))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [entry for _, _, entry in scored[:CANDIDATES_PER_SOURCE]], bm25.CorpusStats(total, df)


def _shorten(text: str) -> str:
    return text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 1] + "…"


def search(
    engine: QueryEngine,
    config: ApiQueryConfig,
    request: SearchRequest,
    *,
    allowed_tables: Iterable[str],
    playbook_entries: Callable[[], Iterable[PlaybookEntry]],
    reader: str | None = None,
    holdout_salt: str = HOLDOUT_SALT,
) -> SearchAnswer:
    """``POST /search``: check the request, pre-filter each source, rank every candidate with BM25.
    ``reader`` (the caller's API key name) drops the entries it is held out from, before any
    counting; ``None`` searches every active entry."""
    available = searchable_sources(allowed_tables)
    sources, terms, ignored = check_search_request(request, available)
    rows: dict[tuple[str, str], str] = {}
    candidates = dict.fromkeys(sources, 0)
    total = 0
    df = dict.fromkeys(terms, 0)
    engine_name: str | None = None
    # The snapshot first: when it cannot be read the call is a 503 anyway, so no query is paid for.
    entries = list(playbook_entries()) if PLAYBOOKS in sources else []
    if reader is not None:
        entries = visible_entries(entries, reader, salt=holdout_salt)
    tables = [s for s in sources if s in SEARCH_TABLES]
    if tables:
        sql = prefilter_sql(config, tables, terms)
        result = run_query(engine, sql, what="the search candidates", config=config)
        engine_name = result.engine
        for record in result.records():
            if record["row_key"] is None:  # a table's statistics row
                total += int(record["hits"] or 0)
                for i, term in enumerate(terms):
                    df[term] += int(record[f"df_{i}"] or 0)
                continue
            found = (str(record["src"]), str(record["row_key"]))
            if found not in rows:  # a key held twice is one candidate (and one result)
                rows[found] = str(record["doc"] or "")
                candidates[found[0]] = candidates.get(found[0], 0) + 1
    if PLAYBOOKS in sources:
        picked, stats = playbook_candidates(entries, terms)
        total += stats.total
        for term, count in stats.df.items():
            df[term] += count
        for entry in picked:
            rows[(PLAYBOOKS, entry.entry_id)] = _entry_text(entry)
            candidates[PLAYBOOKS] += 1
    documents = [bm25.Document(k, text, order=f"{k[0]}/{k[1]}", group=k[0]) for k, text in rows.items()]
    # The collection's df counts rows containing a term's needle (a substring): at least the rows
    # holding the word itself, so never below what the candidates show.
    ranked = bm25.rank(documents, terms, stats=bm25.CorpusStats(max(total, len(documents)), df))
    ranked = ranked[: request.limit]
    shown = bm25.term_words(request.q)  # results name the query's own words, not their stems
    results = []
    for scored in ranked:
        source, key = cast(tuple[str, str], scored.key)
        column = SEARCH_TABLES[source].key if source in SEARCH_TABLES else "entry_id"
        results.append(
            SearchResult(
                source=f"{source}/{column}={key}",
                table=source,
                key=key,
                score=scored.score,
                matched_terms=[shown.get(t, t) for t in scored.matched_terms],
                text=_shorten(rows[(source, key)]),
            )
        )
    return SearchAnswer(
        results=results,
        terms=[shown.get(t, t) for t in terms],
        ignored_terms=[shown.get(t, t) for t in ignored],
        sources=sources,
        candidates=candidates,
        searched_rows=max(total, len(documents)),
        candidate_limit=CANDIDATES_PER_SOURCE,
        returned=len(results),
        engine=engine_name,
    )
