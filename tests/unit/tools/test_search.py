"""POST /search's logic, pure: the tokenizer, BM25 on a fixed corpus, the SQL prefilter (hostile terms
stay literals, and match literally on DuckDB), the allowlist and bad input."""

from __future__ import annotations

import json
from typing import Any

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from opslake.errors import BadRequestError, ServiceUnavailableError
from opslake.models.playbooks import PlaybookEntry
from opslake.query.api import ApiQueryConfig
from opslake.query.base import Column, QueryEngine, QueryResult
from opslake.query.dialect import to_duckdb
from opslake.tools import bm25
from opslake.tools.search import (
    CANDIDATES_PER_SOURCE,
    SearchRequest,
    parse_search_request,
    playbook_candidates,
    prefilter_sql,
    search,
    word_start_pattern,
)
from opslake.tools.snapshots import CachedJsonObject, SnapshotUnavailableError, parse_playbook_snapshot

CONFIG = ApiQueryConfig(database="lake")


# ---- tokenizer -----------------------------------------------------------------------------------
def test_words_are_lowercased_stemmed_and_keep_dotted_codes() -> None:
    assert bm25.words("Welders WELDING, the welds; AWS D1.1 in Houston") == [
        "weld", "weld", "weld", "aws", "d1.1", "houston",
    ]  # fmt: skip


def test_terms_are_shown_as_the_first_word_they_came_from() -> None:
    assert bm25.term_words("Pipe pipes, TIG welders welding") == {
        "pip": "pipe",
        "tig": "tig",
        "weld": "welders",
    }


def test_query_terms_are_deduplicated_and_capped() -> None:
    text = "tig TIG welding welder " + " ".join(f"word{i}" for i in range(12))
    terms, ignored = bm25.query_terms(text, 10)
    assert terms == ["tig", "weld", *(f"word{i}" for i in range(8))]
    assert ignored == [f"word{i}" for i in range(8, 12)]


@pytest.mark.parametrize("text", ["", "   ", "the of and", "a b c", "%%% ''' ___ \\\\", "!!"])
def test_a_text_of_stopwords_symbols_or_single_letters_has_no_terms(text: str) -> None:
    assert bm25.query_terms(text, 10) == ([], [])


# ---- BM25 on a fixed corpus ----------------------------------------------------------------------
CORPUS = [
    bm25.Document("long", "tig welding on stainless steel pipe at a refinery, night shifts, overtime", "b"),
    bm25.Document("short", "tig welding", "a"),
    bm25.Document("mig", "mig welding", "c"),
    bm25.Document("forklift", "forklift operator, warehouse", "d"),
    bm25.Document("tig-twice", "tig welder, tig welding", "e"),
]


def test_bm25_ranks_rare_terms_repeats_and_short_documents_first() -> None:
    ranked = bm25.rank(CORPUS, ["tig", "weld"])
    # "tig" is rarer than "weld" (3 of 5 documents vs 4); repeats count (the same length as "short"
    # but every term twice); a long text is discounted;
    # a document with neither term is not a result.
    assert [s.key for s in ranked] == ["tig-twice", "short", "long", "mig"]
    assert [s.matched_terms for s in ranked] == [["tig", "weld"]] * 3 + [["weld"]]
    assert ranked[0].score > ranked[1].score > ranked[2].score > ranked[3].score > 0


def test_bm25_ties_go_to_the_order_key_and_idf_is_never_negative() -> None:
    same = [bm25.Document(k, "crane operator", order) for k, order in (("x", "2"), ("y", "1"), ("z", "3"))]
    crane, _ = bm25.query_terms("cranes", 10)
    ranked = bm25.rank(same, crane)
    assert [s.key for s in ranked] == ["y", "x", "z"]  # a term in every document still scores above zero
    assert ranked[0].score == ranked[2].score > 0
    assert bm25.rank(same, []) == [] and bm25.rank([], crane) == []


# ---- the SQL prefilter ---------------------------------------------------------------------------
HOSTILE = ["o'brien", "100%", "a_b", "back\\slash", "'); DROP TABLE workers; --"]


def _string_literals(sql: str) -> list[str]:
    return [lit.this for lit in sqlglot.parse_one(sql, read="athena").find_all(exp.Literal) if lit.is_string]


def test_prefilter_sql_keeps_hostile_terms_literal_and_reads_only_the_named_tables() -> None:
    sql = prefilter_sql(CONFIG, ["workers", "placements"], HOSTILE)
    assert " LIKE " not in sql.upper()  # regexp_like: % and _ are plain characters, no ESCAPE clause needed
    (statement,) = sqlglot.parse(sql, read="athena")  # one statement: the quote did not end it
    assert statement is not None
    assert {word_start_pattern(t) for t in HOSTILE} <= set(_string_literals(sql))
    ctes = {cte.alias for cte in statement.find_all(exp.CTE)}
    tables = {(t.db, t.name) for t in statement.find_all(exp.Table) if t.name not in ctes}
    assert tables == {("lake", "workers"), ("lake", "placements")}  # and never ops
    assert sql.count(f"LIMIT {CANDIDATES_PER_SOURCE}") == 2


def test_prefilter_matches_terms_literally_on_duckdb() -> None:
    """Run the prefilter (as the embedded engine would, transpiled to DuckDB) over rows holding the
    hostile characters: ``%`` and ``_`` are not wildcards, a quote is a quote, a backslash is itself."""
    con = duckdb.connect()
    con.execute("CREATE SCHEMA lake")
    con.execute(
        "CREATE TABLE lake.workers (worker_id VARCHAR, name VARCHAR, role VARCHAR, city VARCHAR, "
        "state VARCHAR, skills VARCHAR[], certifications VARCHAR[], availability VARCHAR)"
    )
    rows = [
        ("W00001", "Pat O'Brien", "welder", "Austin", "TX", ["tig welding"], [], "immediate"),
        ("W00002", "Obrien Smith", "welder", "Austin", "TX", ["100% inspection"], [], "immediate"),
        ("W00003", "Sam Ray", "welder", "Austin", "TX", ["1000 hours", "axb"], [], "immediate"),
        ("W00004", "Lee a_b", "welder", "Austin", "TX", ["back\\slash"], [], "immediate"),
    ]
    con.executemany("INSERT INTO lake.workers VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def hits(terms: list[str]) -> dict[str, int]:
        sql = sqlglot.transpile(prefilter_sql(CONFIG, ["workers"], terms), read="athena", write="duckdb")[0]
        return {row[1]: row[3] for row in con.execute(sql).fetchall() if row[1] is not None}

    assert hits(["o'brien"]) == {"W00001": 1}
    assert hits(["100%"]) == {"W00002": 1}
    assert hits(["a_b"]) == {"W00004": 1}
    assert hits(["back\\slash"]) == {"W00004": 1}
    assert hits(["'); DROP TABLE workers; --"]) == {}
    assert hits(["welding", "tig", "austin"]) == {"W00001": 3, "W00002": 1, "W00003": 1, "W00004": 1}
    assert con.execute("SELECT count(*) FROM lake.workers").fetchone() == (4,)
    # the statistics row: every row counted, and how many rows hold each term (BM25's N and df)
    sql = sqlglot.transpile(
        prefilter_sql(CONFIG, ["workers"], ["welding", "tig", "austin"]), read="athena", write="duckdb"
    )[0]
    (stats,) = [row for row in con.execute(sql).fetchall() if row[1] is None]
    assert stats == ("workers", None, None, 4, 1, 1, 4)


# ---- the request, the allowlist, playbook entries --------------------------------------------------
@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"q": ""}, "q", "at least 1 character"),
        ({"q": "   "}, "q", "at least 1 character"),
        ({"q": "w" * 201}, "q", "at most 200 characters"),
        ({}, "q", "Field required"),
        ({"q": "welder", "limit": 0}, "limit", "greater than or equal to 1"),
        ({"q": "welder", "limit": 51}, "limit", "less than or equal to 50"),
        ({"q": "welder", "limit": True}, "limit", "valid integer"),  # was read as limit 1
        ({"q": "welder", "limit": "5"}, "limit", "valid integer"),
        ({"q": "welder", "sources": ["ops"]}, "sources.0", "'workers', 'placements' or 'playbooks'"),
        ({"q": "welder", "sources": []}, "sources", "at least 1 item"),
        ({"q": "welder", "sql": "SELECT 1"}, "sql", "Extra inputs are not permitted"),
    ],
)
def test_bad_bodies_are_400s_naming_the_field(body: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_search_request(json.dumps(body))
    assert caught.value.status == 400
    assert any(d["field"] == field and says in d["message"] for d in caught.value.detail), caught.value.detail


class RecordingEngine(QueryEngine):
    """Answers every query with the given records and keeps the SQL."""

    name = "embedded"

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self.sql: list[str] = []

    def run(self, sql: str, *, timeout_s: float = 60.0) -> QueryResult:
        self.sql.append(sql)
        names = list(self.records[0]) if self.records else ["src", "row_key", "doc", "hits"]
        rows = [tuple(r[n] for n in names) for r in self.records]
        return QueryResult([Column(n, "varchar") for n in names], rows, engine=self.name, query_id="q-1")


def _row(src: str, key: str | None, doc: str | None, hits: int, *df: int) -> dict[str, Any]:
    return {"src": src, "row_key": key, "doc": doc, "hits": hits, **{f"df_{i}": v for i, v in enumerate(df)}}


def _entry(entry_id: str, trigger: str, action: str, status: str = "active") -> PlaybookEntry:
    return PlaybookEntry.model_validate(
        {
            "entry_id": entry_id, "trigger": trigger, "action": action, "kind": "do", "confidence": 0.8,
            "domain": "staffing", "status": status, "created_at": "2026-11-20T10:00:00Z",
        }
    )  # fmt: skip


ENTRIES = [
    _entry("pb-tig", "before matching tig welders", "filter on state, then rank by tig skills"),
    _entry("pb-retired", "tig welders anywhere", "ask for tig welding", status="retired"),
    _entry("pb-sql", "before querying ops", "filter on dt and hour first"),
]


def _search(body: dict[str, Any], engine: QueryEngine, allowed: list[str] | None = None) -> Any:
    return search(
        engine,
        CONFIG,
        SearchRequest.model_validate(body),
        allowed_tables=allowed or ["workers", "placements", "ops"],
        playbook_entries=lambda: ENTRIES,
    )


def test_search_ranks_rows_and_active_entries_together_and_names_their_sources() -> None:
    engine = RecordingEngine(
        [
            _row(
                "workers",
                "W00042",
                "W00042 | Ana Diaz | welder | Houston | TX | tig welding, mig welding",
                3,
                1,
                1,
                1,
            ),
            _row("workers", "W00007", "W00007 | Bo Li | welder | Austin | TX | mig welding", 1, 0, 1, 0),
            _row("workers", None, None, 3000, 100, 400, 60),
            _row(
                "placements",
                "P000001",
                "P000001 | W00042 | Gulf Coast Refining | welder | Houston",
                2,
                0,
                1,
                1,
            ),
            _row("placements", None, None, 5000, 0, 600, 200),
        ]
    )
    answer = _search({"q": "TIG welders in Houston"}, engine)
    assert answer.terms == ["tig", "welders", "houston"]
    assert answer.sources == ["workers", "placements", "playbooks"]
    assert answer.candidates == {"workers": 2, "placements": 1, "playbooks": 1}
    assert answer.searched_rows == 3000 + 5000 + 2  # the statistics rows and the two active entries
    sources = [r.source for r in answer.results]
    assert sources[0] == "workers/worker_id=W00042"
    assert set(sources) == {
        "workers/worker_id=W00042", "workers/worker_id=W00007", "placements/placement_id=P000001",
        "playbooks/entry_id=pb-tig",
    }  # fmt: skip
    assert answer.results[0].matched_terms == ["tig", "welders", "houston"]
    assert [r.score for r in answer.results] == sorted((r.score for r in answer.results), reverse=True)
    (sql,) = engine.sql
    assert '"lake"."workers"' in sql and '"lake"."placements"' in sql and "ops" not in sql
    assert "TIG welders in Houston" not in sql  # only the terms reach SQL


def test_sources_follow_the_sql_allowlist() -> None:
    engine = RecordingEngine([])
    answer = _search({"q": "welder", "sources": ["workers"]}, engine, allowed=["workers", "ops"])
    assert answer.sources == ["workers"] and '"lake"."placements"' not in engine.sql[0]
    with pytest.raises(BadRequestError, match="placements cannot be searched here; available sources: "
                       "workers, playbooks"):  # fmt: skip
        _search({"q": "welder", "sources": ["placements"]}, engine, allowed=["workers", "ops"])
    only_playbooks = RecordingEngine([])
    answer = _search({"q": "tig", "sources": ["playbooks"]}, only_playbooks)
    assert only_playbooks.sql == [] and answer.engine is None
    assert [r.source for r in answer.results] == ["playbooks/entry_id=pb-tig"]  # not the retired one


def test_a_readers_held_out_entries_are_neither_found_nor_counted() -> None:
    """Issue 16: POST /search is no door around a holdout experiment; the reader is the key's name."""
    from opslake.models.playbooks import arm_of

    entries = [
        _entry(f"pb_{i:02d}", f"tig rule {i}", "use tig").model_copy(update={"holdout_share": 0.5})
        for i in range(20)
    ]
    engine = RecordingEngine([])
    body = SearchRequest.model_validate({"q": "tig", "sources": ["playbooks"], "limit": 50})
    for reader in ("alpha", "beta"):
        answer = search(
            engine, CONFIG, body, allowed_tables=[], playbook_entries=lambda: entries, reader=reader
        )
        shown = sorted(r.key for r in answer.results)
        assert shown == [e.entry_id for e in entries if arm_of(reader, e) == "treatment"]
        assert answer.searched_rows == len(shown) < 20  # the held-out ones are not even counted
    everyone = search(engine, CONFIG, body, allowed_tables=[], playbook_entries=lambda: entries)
    assert everyone.returned == 20  # no reader named: every active entry


def test_a_query_with_no_searchable_term_is_a_400_that_says_why() -> None:
    engine = RecordingEngine([])
    with pytest.raises(BadRequestError, match="q has no searchable term") as caught:
        _search({"q": "the of %%% a"}, engine)
    assert caught.value.detail == {"field": "q"} and engine.sql == []


def test_playbook_candidates_are_active_and_bounded() -> None:
    many = [_entry(f"pb-{i:04d}", f"tig rule {i}", "use tig") for i in range(CANDIDATES_PER_SOURCE + 5)]
    assert len(playbook_candidates(many, ["tig"])[0]) == CANDIDATES_PER_SOURCE
    picked, stats = playbook_candidates(ENTRIES, ["tig", "dt"])
    assert [e.entry_id for e in picked] == ["pb-sql", "pb-tig"]  # one term each: by id
    assert stats == bm25.CorpusStats(total=2, df={"tig": 1, "dt": 1})  # the retired entry is not counted


# ---- review (helper L): the prefilter matches words, not substrings; odd rows ----------------------
def _workers_table(rows: list[tuple[Any, ...]]) -> Any:
    con = duckdb.connect()
    con.execute("CREATE SCHEMA lake")
    con.execute(
        "CREATE TABLE lake.workers (worker_id VARCHAR, name VARCHAR, role VARCHAR, city VARCHAR, "
        "state VARCHAR, skills VARCHAR[], certifications VARCHAR[], availability VARCHAR)"
    )
    con.executemany("INSERT INTO lake.workers VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return con


def _embedded_candidates(con: Any, terms: list[str]) -> dict[str, int]:
    """The prefilter as the embedded engine runs it: through the dialect layer (to_duckdb)."""
    sql = to_duckdb(prefilter_sql(CONFIG, ["workers"], terms)).sql
    return {row[1]: row[3] for row in con.execute(sql).fetchall() if row[1] is not None}


def test_a_term_inside_other_words_does_not_crowd_the_word_out_of_the_candidates() -> None:
    # 400 rows hold "al" inside "Dallas"; the one row in the state AL sorts last by key. A substring
    # prefilter kept 300 Dallas rows (none of which BM25 then matches) and dropped the AL row.
    rows = [(f"W{i:05d}", "Pat Roe", "welder", "Dallas", "TX", ["tig"], [], "now") for i in range(400)]
    rows.append(("W99999", "Sam Poe", "welder", "Mobile", "AL", ["tig"], [], "now"))
    con = _workers_table(rows)
    assert _embedded_candidates(con, ["al"]) == {"W99999": 1}
    (stats,) = [r for r in con.execute(to_duckdb(prefilter_sql(CONFIG, ["workers"], ["al"])).sql).fetchall()
                if r[1] is None]  # fmt: skip
    assert stats[3:] == (401, 1)  # df counts the word, not the substring


def test_the_word_start_prefilter_still_finds_stemmed_forms_and_any_script() -> None:
    con = _workers_table(
        [
            ("W00001", "Ana Müller", "Welder", "Houston", "TX", ["TIG welding"], ["AWS D1.1"], "now"),
            ("W00002", "Bo Li", "rigger", "東京", "TX", ["medical supplies"], [], "now"),
            ("W00003", "Cy Ode", "driver", "Austin", "TX", ["unweldable"], ["xd1.1"], "now"),
        ]
    )
    terms, _ = bm25.query_terms("welders müller d1.1 supply 東京", 10)
    assert _embedded_candidates(con, terms) == {"W00001": 3, "W00002": 2}


def test_playbook_candidates_match_words_not_substrings() -> None:
    entries = [_entry("pb-a", "install metal racks", "call the vendor"), _entry("pb-b", "AL sites", "check")]
    picked, stats = playbook_candidates(entries, ["al"])
    assert [e.entry_id for e in picked] == ["pb-b"] and stats.df == {"al": 1}


def test_a_row_with_no_key_is_not_taken_for_the_statistics_row() -> None:
    con = _workers_table(
        [
            (None, "Ana Diaz", "welder", "Houston", "TX", ["tig"], [], "now"),
            ("W00002", "Bo Li", "welder", "Austin", "TX", ["tig"], [], "now"),
        ]
    )
    fetched = con.execute(to_duckdb(prefilter_sql(CONFIG, ["workers"], ["tig"])).sql).fetchall()
    assert [r[1:] for r in fetched if r[1] is None] == [(None, None, 2, 2)]  # only the statistics row


def test_a_key_twice_is_one_candidate() -> None:
    engine = RecordingEngine(
        [
            _row("workers", "W00042", "W00042 | Ana Diaz | welder | tig", 1, 1),
            _row("workers", "W00042", "W00042 | Ana Diaz | welder | tig", 1, 1),
            _row("workers", None, None, 10, 2),
        ]
    )
    answer = _search({"q": "tig", "sources": ["workers"]}, engine)
    assert answer.candidates == {"workers": 1} and [r.key for r in answer.results] == ["W00042"]


def test_an_unreadable_playbook_snapshot_fails_before_the_engine_is_queried() -> None:
    """The snapshot is read first: a 503 for it must not cost an Athena query first."""
    engine = RecordingEngine([])

    def unreadable() -> list[PlaybookEntry]:
        raise ServiceUnavailableError("playbooks cannot be read right now", retry_after_s=5)

    with pytest.raises(ServiceUnavailableError):
        search(
            engine,
            CONFIG,
            SearchRequest.model_validate({"q": "tig"}),
            allowed_tables=["workers", "placements"],
            playbook_entries=unreadable,
        )
    assert engine.sql == []


def test_compatibility_forms_and_decomposed_accents_are_the_plain_word() -> None:
    """Full-width letters (an IME's default) and combining accents (macOS file names, some pastes)
    are normalised (NFKC) before tokenizing, so ``ＴＩＧ`` is ``tig`` and ``cafe\\u0301`` is ``café``."""
    assert bm25.query_terms("ＴＩＧ Ｗｅｌｄｅｒ cafe\u0301", 10) == (["tig", "weld", "café"], [])
    assert bm25.words("Ｔｉｇ welding at the cafe\u0301") == ["tig", "weld", "café"]


@pytest.mark.parametrize("document", [[], "x", 1, None, {}, {"entries": []}, {"generated_at": None}])
def test_a_malformed_playbook_snapshot_is_unavailable_not_a_crash(document: Any) -> None:
    """A snapshot that is JSON but not the contract (a list, no ``generated_at``) was a TypeError or
    KeyError past the cache's ``ValueError`` guard: a 500 on /search and /playbooks instead of a 503."""

    class Body:
        def read(self) -> bytes:
            return json.dumps(document).encode()

    class S3:
        def get_object(self, **_: Any) -> dict[str, Any]:
            return {"Body": Body(), "ETag": '"e"'}

    snapshot = CachedJsonObject(
        lambda: S3(), "lake", "playbooks/current.json", parse_playbook_snapshot, ttl_s=60
    )
    with pytest.raises(SnapshotUnavailableError, match="invalid content"):
        snapshot.get()


def test_every_term_the_tokenizer_makes_has_a_pattern_and_odd_characters_are_refused() -> None:
    text = (
        "d1.1 Ｄ１．１ o'brien 100% a_b back\\slash naïve cafe\u0301 東京 ①② x\u200fy \u202eabc ﬁt "
        + "z" * 150
    )
    terms, ignored = bm25.query_terms(text, 50)
    assert "d1.1" in terms and not ignored
    for term in terms:
        pattern = word_start_pattern(term)
        assert pattern.startswith("(^|[^\\p{L}\\p{N}])") and "'" not in pattern
    assert word_start_pattern("d1.1").endswith("d1\\.1")
    with pytest.raises(ValueError, match="not a search term"):
        word_start_pattern("a\u200fb")
