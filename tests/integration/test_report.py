"""The HTML report, built from a local lake through the embedded engine: self-contained, every
section present, hostile op text escaped, and "no data yet" (not a crash) for missing tables."""

from __future__ import annotations

import contextlib
import io
import json
import re
from datetime import UTC, datetime, timedelta
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from opslake.config import load_settings
from opslake.lake.derived import PLAYBOOKS_SCHEMA
from opslake.lake.schema import glue_columns
from opslake.query.base import QueryEngine
from opslake.query.factory import create_engine
from opslake_local.cli import main as cli_main
from opslake_local.drain import Drainer
from opslake_local.report import build_report, write_report
from opslake_local.stack import LocalStack

pytestmark = pytest.mark.integration

HOSTILE = '<script>alert("pwned")</script><img src="https://evil.example/x.png">'
SECTIONS = ("overview", "cycles", "hourly", "signatures", "latency", "playbooks", "diagnoses")
_TS = pa.timestamp("ms", tz="UTC")
_IDS = pa.list_(pa.string())

DERIVED_SCHEMAS: dict[str, pa.Schema] = {
    "signatures": pa.schema(
        [("signature_id", pa.string()), ("endpoint", pa.string()), ("error_type", pa.string()),
         ("template", pa.string()), ("count", pa.int64()), ("agent_count", pa.int64()),
         ("variant_count", pa.int64()), ("first_seen", _TS), ("last_seen", _TS), ("sample_op_ids", _IDS),
         ("diagnoses", pa.int64()), ("last_diagnosis_id", pa.string()), ("last_diagnosed_at", _TS)]
    ),
    "diagnoses": pa.schema(
        [("diagnosis_id", pa.string()), ("signature_id", pa.string()), ("endpoint", pa.string()),
         ("template", pa.string()), ("cause", pa.string()), ("agent_adjustment", pa.string()),
         ("avoid", pa.bool_()), ("category", pa.string()), ("confidence", pa.float64()),
         ("diagnosed_by", pa.string()), ("failure_count", pa.int64()), ("agent_count", pa.int64()),
         ("evidence_op_ids", _IDS), ("created_at", _TS)]
    ),
    "playbooks": PLAYBOOKS_SCHEMA,  # the consolidator's own: the report reads its experiment columns
}  # fmt: skip


def derived_rows(hostile: str = HOSTILE) -> dict[str, list[dict[str, Any]]]:
    """A few rows per derived table; the first signature's template carries ``hostile`` text."""
    now = datetime.now(UTC).replace(microsecond=0)
    before = now - timedelta(hours=1)
    return {
        "signatures": [
            {"signature_id": "sg_col", "endpoint": "/sql", "error_type": "sql_column_not_found",
             "template": f"COLUMN_NOT_FOUND: Column '<*>' cannot be resolved {hostile}", "count": 12,
             "agent_count": 5, "variant_count": 3, "first_seen": before, "last_seen": now,
             "sample_op_ids": ["op1", "op2"], "diagnoses": 1, "last_diagnosis_id": "dg_sg_col_1",
             "last_diagnosed_at": now},
            {"signature_id": "sg_id", "endpoint": "/worker/{id}", "error_type": "not_found",
             "template": "no worker with id '<*>'", "count": 4, "agent_count": 3, "variant_count": 1,
             "first_seen": before, "last_seen": now, "sample_op_ids": ["op3"], "diagnoses": 0,
             "last_diagnosis_id": None, "last_diagnosed_at": None},
        ],
        "diagnoses": [
            {"diagnosis_id": "dg_sg_col_1", "signature_id": "sg_col", "endpoint": "/sql",
             "template": f"COLUMN_NOT_FOUND {hostile}", "cause": "agents guess column names",
             "agent_adjustment": "GET /tables/{name} before writing SQL", "avoid": True,
             "category": "unknown_column", "confidence": 0.85, "diagnosed_by": "heuristic",
             "failure_count": 12, "agent_count": 5, "evidence_op_ids": ["op1", "op2", "op4"], "created_at": now},
        ],
        "playbooks": [
            {"entry_id": "pb_sql_describe", "trigger": "writing SQL", "action": f"describe the table {hostile}",
             "kind": "do", "domain": "sql", "scope": "project", "endpoint": "/sql", "task_class": None,
             "signature_id": "sg_col", "status": "active", "confidence": 0.8,
             "evidence_op_ids": ["op5", "op6", "op7"], "evidence_agent_count": 3, "created_at": before,
             "published_at": before, "retired_at": None, "fix_kind": "column", "fix_names": ["workers", "hourly_rate"],
             "experiment_stage": "new", "holdout_share": 0.5, "treatment_ops": 31, "treatment_failures": 2,
             "treatment_rate": 0.0645, "treatment_rate_low": 0.018, "treatment_rate_high": 0.207, "holdout_ops": 29,
             "holdout_failures": 9, "holdout_rate": 0.3103, "holdout_rate_low": 0.17, "holdout_rate_high": 0.49,
             "effect": 0.2458, "effect_low": 0.051, "effect_high": 0.422, "last_verdict": "helpful",
             "helpful_count": 1, "harmful_count": 0, "followed_treatment": 7, "followed_holdout": 0},
            {"entry_id": "pb_match_filters", "trigger": "staffing a job", "action": "send role and state",
             "kind": "avoid", "domain": "staffing", "scope": "project", "endpoint": "/match",
             "task_class": "staff_job", "signature_id": None, "status": "active", "confidence": 0.6,
             "evidence_op_ids": ["op8"], "evidence_agent_count": 2, "created_at": now, "published_at": now,
             "retired_at": None, "experiment_stage": "new", "last_verdict": "insufficient"},
        ],
    }  # fmt: skip


def write_derived_tables(
    stack: LocalStack, *, database: str | None = None, rows: dict[str, list[dict[str, Any]]] | None = None
) -> None:
    """Glue tables ``signatures``, ``diagnoses``, ``playbooks`` with one small Parquet file each
    (replacing any the template declared), under ``report-test/<table>/`` in the lake bucket."""
    glue, s3 = stack.client("glue"), stack.client("s3")
    database = database or stack.environment["OPSLAKE_GLUE_DATABASE"]
    rows = rows if rows is not None else derived_rows()
    for name, schema in DERIVED_SCHEMAS.items():
        prefix = f"report-test/{database}/{name}/"
        if rows.get(name):
            sink = io.BytesIO()
            pq.write_table(pa.Table.from_pylist(rows[name], schema=schema), sink)
            s3.put_object(Bucket=stack.bucket, Key=prefix + "part-0.parquet", Body=sink.getvalue())
        with contextlib.suppress(glue.exceptions.EntityNotFoundException):
            glue.delete_table(DatabaseName=database, Name=name)
        glue.create_table(
            DatabaseName=database,
            TableInput={
                "Name": name,
                "TableType": "EXTERNAL_TABLE",
                "StorageDescriptor": {
                    "Columns": glue_columns(schema),
                    "Location": f"s3://{stack.bucket}/{prefix}",
                    "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
                    "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
                    "SerdeInfo": {
                        "SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
                    },
                },
            },
        )


def engine_for(stack: LocalStack, database: str | None = None) -> QueryEngine:
    env = {**stack.environment, "OPSLAKE_QUERY_ENGINE": "embedded"}
    if database:
        env["OPSLAKE_GLUE_DATABASE"] = database
    return create_engine(load_settings(env), glue_client=stack.client("glue"))


def seed_ops(stack: LocalStack, client: httpx.Client, drainer: Drainer) -> None:
    """A few real tool calls (one failing with hostile text) and events, drained into the lake."""
    assert stack.api_key is not None
    headers = {"x-api-key": stack.api_key.value}
    assert (
        client.post("/sql", json={"sql": "SELECT count(*) FROM workers"}, headers=headers).status_code == 200
    )
    assert client.get("/worker/W99999", headers=headers).status_code == 404
    answer = client.post(
        "/events",
        json={
            "endpoint": "tool:<i>query</i>",
            "success": False,
            "duration_ms": 12.5,
            "error": HOSTILE,
            "error_type": "Hostile<b>",
            "input_summary": HOSTILE,
        },
        headers=headers,
    )
    assert answer.status_code == 202
    assert drainer.drain().failed == 0


SUMMARY = {
    "seed": 7,
    "note": HOSTILE,
    "cycles": [
        {"cycle": 1, "arm": "with playbooks", "failure_rate": 0.2, "tool_calls": 50, "tool_failures": 10},
        {"cycle": 2, "arm": "with playbooks", "failure_rate": 0.1, "tool_calls": 60, "tool_failures": 6},
        {"cycle": 1, "playbooks_enabled": False, "failure_rate": 0.22, "tool_calls": 50, "tool_failures": 11},
        {"cycle": 2, "playbooks_enabled": False, "failure_rate": 0.21, "tool_calls": 52, "tool_failures": 11},
    ],
    "agreement": {
        "entries_published": 2, "refused_by_quality_gate": 3, "refused_by_reason": {"restates the endpoint": 3},
        "fleet_with": {"failures": 6, "ops": 60, "low": 0.047, "high": 0.201, "rate": 0.1},
        "fleet_without": {"failures": 11, "ops": 52, "low": 0.122, "high": 0.34, "rate": 0.2115},
        "fleet_delta": 0.1115, "fleet_delta_low": -0.025, "fleet_delta_high": 0.25, "fleet_first_cycle": 2,
        "pooled_holdout_delta": 0.2458, "judged_entries": 1, "agree_in_sign": "yes",
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def lake(local: tuple[LocalStack, httpx.Client, Drainer]) -> LocalStack:
    stack, client, drainer = local
    seed_ops(stack, client, drainer)
    write_derived_tables(stack)
    return stack


def assert_self_contained(html: str) -> None:
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I), "external resource"
    assert "@import" not in html and "url(" not in html
    assert html.count("<script>") == 1  # only the hashed render marker


def test_report_has_every_section_with_charts_and_escapes_hostile_text(lake: LocalStack) -> None:
    html = build_report(engine_for(lake), summary=SUMMARY)
    assert_self_contained(html)
    for anchor in SECTIONS:
        assert f'<section id="{anchor}">' in html
    assert "no data yet" not in html
    assert html.count('<svg class="chart"') == 5  # cycles, hourly, signatures, latency, experiments
    for chart in re.findall(r'<svg class="chart".*?</svg>', html, re.S):
        assert "<title>" in chart and "aria-label=" in chart
        assert re.search(r"<(polyline|rect class=\"bar\"|circle class=\"point\")", chart)
    # hostile text from the lake and from the summary is shown, escaped, never as markup
    assert "<script>alert" not in html and "<img" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in html
    assert "sg_col" in html and "pb_sql_describe" in html and "dg_sg_col_1" in html
    assert "/worker/{id}" in html  # a latency row
    # the experiment as the table holds it: both arms with intervals, the difference and the verdict
    assert "2/31 6.5% [1.8%, 20.7%]" in html and "9/29 31.0% [17.0%, 49.0%]" in html
    assert "+24.6 pp [+5.1, +42.2]" in html and "helpful" in html
    assert "holdout (entry withheld)" in html and 'class="point"' in html and 'class="whisker"' in html
    # the fleets with intervals beside the pooled holdout estimate, and whether they agree in sign
    assert "10.0% [4.7%, 20.1%] (6 of 60 tool calls)" in html and "+11.2 pp [-2.5, +25.0]" in html
    assert "agree in sign" in html and "+24.6 pp (Mantel–Haenszel over 1 judged entries)" in html
    assert "with playbooks" in html and "without playbooks" in html
    assert "tool:&lt;i&gt;query&lt;/i&gt;" in html  # an agent-chosen endpoint name, escaped


def test_report_without_derived_tables_says_no_data_yet(lake: LocalStack) -> None:
    glue = lake.client("glue")
    glue.create_database(DatabaseInput={"Name": "report_empty"})
    html = build_report(engine_for(lake, "report_empty"))  # no table at all, no summary
    assert_self_contained(html)
    for anchor in SECTIONS:
        assert f'<section id="{anchor}">' in html
    for table in ("ops", "signatures", "diagnoses", "playbooks"):
        assert f"table <code>{table}</code> does not exist yet" in html
    assert "no demo summary" in html
    assert '<svg class="chart"' not in html


def test_report_with_empty_tables_says_no_rows_yet(lake: LocalStack) -> None:
    glue = lake.client("glue")
    glue.create_database(DatabaseInput={"Name": "report_no_rows"})
    write_derived_tables(lake, database="report_no_rows", rows={})
    html = build_report(engine_for(lake, "report_no_rows"))
    for table in ("signatures", "diagnoses", "playbooks"):
        assert f"table <code>{table}</code> has no rows yet" in html
    assert "table <code>ops</code> does not exist yet" in html


def test_cli_report_writes_the_file(lake: LocalStack, tmp_path: Path) -> None:
    """``opslake report`` on a running stack (found through its state file)."""
    state = tmp_path / "local.json"
    state.write_text(json.dumps({**lake.describe(), "api_url": "http://127.0.0.1:1"}))
    out = tmp_path / "report.html"
    assert cli_main(["--state", str(state), "report", "--out", str(out)]) == 0
    html = out.read_text()
    assert_self_contained(html)
    assert "pb_sql_describe" in html
    write_report(tmp_path / "again" / "r.html", html)
    assert (tmp_path / "again" / "r.html").read_text() == html


ATTRIBUTE_BREAKOUT = '"><img src=x onerror=alert(1)>'
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "nav", "a", "section", "code",
    "table", "thead", "tbody", "tr", "th", "td", "span", "script",
    "svg", "rect", "line", "text", "polyline", "circle",
}  # fmt: skip


class _Tags(HTMLParser):
    """Every start tag of a page with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_agent_written_text_in_entries_and_diagnoses_is_escaped(lake: LocalStack) -> None:
    """Playbook entries and diagnoses carry text that agents (or a model) wrote: whatever it holds,
    it reads as text in the report and never becomes a tag or an attribute."""
    hostile = f"{HOSTILE}{ATTRIBUTE_BREAKOUT}"
    rows = derived_rows(hostile)
    rows["playbooks"][0] |= {
        "trigger": f"when {hostile}",
        "action": f"do {hostile}",
        "kind": ATTRIBUTE_BREAKOUT,
    }
    rows["playbooks"][1] |= {"entry_id": f"pb_{ATTRIBUTE_BREAKOUT}", "task_class": hostile}
    rows["diagnoses"][0] |= {"cause": f"cause {hostile}", "agent_adjustment": f"adjust {hostile}"}
    lake.client("glue").create_database(DatabaseInput={"Name": "report_hostile"})
    write_derived_tables(lake, database="report_hostile", rows=rows)

    html = build_report(engine_for(lake, "report_hostile"), summary={**SUMMARY, "note": hostile})

    assert_self_contained(html)
    parser = _Tags()
    parser.feed(html)
    assert {tag for tag, _ in parser.tags} <= ALLOWED_TAGS
    assert [tag for tag, _ in parser.tags].count("script") == 1  # only the hashed render marker
    assert not any(name.startswith("on") for _, attrs in parser.tags for name in attrs)
    assert "<img" not in html and "<script>alert" not in html
    breakout = "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
    for shown in (f"when {HOSTILE}", f"do {HOSTILE}", f"cause {HOSTILE}", f"adjust {HOSTILE}"):
        assert escape(shown) + breakout in html  # the whole text, as text
    assert f'<span class="tag ">{breakout}</span>' in html  # a hostile kind gets no class of its own
    assert f"pb_{breakout}" in html


def test_the_demo_s_second_world_gets_its_own_section(lake: LocalStack) -> None:
    """The service desk's fleets per cycle, its entries' experiments and its scorecard per planted
    mistake, from the demo summary's ``helpdesk`` (agent-written text escaped); no section without it."""
    entry = {
        "entry_id": "pb_desk", "fix": "tool:close_ticket preceding_call add_comment", "action": HOSTILE,
        "treatment_failures": 1, "treatment_ops": 20, "treatment_rate": 0.05, "treatment_low": 0.009,
        "treatment_high": 0.236, "holdout_failures": 6, "holdout_ops": 22, "holdout_rate": 0.2727,
        "holdout_low": 0.13, "holdout_high": 0.48, "effect": 0.2227, "effect_low": 0.01, "effect_high": 0.43,
        "verdict": "helpful", "fleet_delta": 0.12, "sign": "agree",
    }  # fmt: skip
    mistake = {
        "cause": "close_without_comment", "tool": "close_ticket", "planted": True,
        "contrasts": ["preceding_call", "error_rule"], "made_with": 3, "made_without": 19, "avoided": 16,
        "failed_calls": 22, "signatures": ["sg_close_a", "sg_close_b"], "purity": 1.0, "entries": ["pb_desk"],
        "followed": 16,
    }  # fmt: skip
    desk = {
        "cycles": [{**c, "tool_calls": 150, "tool_failures": 20} for c in SUMMARY["cycles"]],  # type: ignore[attr-defined]
        "experiments": [entry],
        "agreement": {**SUMMARY["agreement"], "entries_published": 1},  # type: ignore[dict-item]
        "mistakes": [mistake],
        "scorecard": {"signatures": 2, "entries_naming_fix": ["pb_desk"], "generic_entries": []},
    }
    html = build_report(engine_for(lake), summary={**SUMMARY, "helpdesk": desk})
    assert_self_contained(html)
    assert '<section id="helpdesk">' in html and "Second world: the service desk" in html
    assert html.count('<svg class="chart"') == 6  # its fleets per cycle beside the five others
    section = html.split('<section id="helpdesk">', 1)[1].split("</section>", 1)[0]
    assert "1/20 5.0% [0.9%, 23.6%]" in section and "+22.3 pp [+1.0, +43.0]" in section
    assert "close_without_comment" in section and "2: sg_close_a, sg_close_b" in section
    assert "preceding_call, error_rule" in section and "3 / 19" in section and "1.00" in section
    assert "<script>alert" not in html and "&lt;script&gt;alert(&quot;pwned&quot;)" in section
    assert '<section id="helpdesk">' not in build_report(engine_for(lake), summary=SUMMARY)
