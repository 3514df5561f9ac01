"""The ``opslake`` CLI in-process against a running local stack (state file in tmp_path):
API keys that the local API Gateway honours, SQL and analyst queries on the embedded engine,
and a clear error when no stack runs."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from opslake_local.cli import main
from opslake_local.drain import Drainer
from opslake_local.http import LocalApi
from opslake_local.stack import QUIET_ENV, LocalStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Running:
    stack: LocalStack
    api: LocalApi
    drainer: Drainer
    http: httpx.Client
    state: Path

    def cli(self, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--state", str(self.state), *argv])
        out, err = capsys.readouterr()
        return code, out, err

    def post(self, key: str, **op: object) -> httpx.Response:
        body = {"endpoint": "tool:cli", "success": True, "duration_ms": 12.5, **op}
        return self.http.post("/events", json=body, headers={"x-api-key": key})


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    state = tmp_path_factory.mktemp("cli") / "local.json"
    # the jobs read up to now (no settling delay): what a test just sent is in their window
    with LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_ANALYZER_SETTLE_S": "0"}) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker, key_max_age_s=0)  # see every revoke at once
        base_url = api.start()
        state.write_text(json.dumps({"api_url": base_url, **stack.describe(), "pid": os.getpid()}))
        try:
            with httpx.Client(base_url=base_url, timeout=30) as client:
                yield Running(stack, api, Drainer(stack, invoker), client, state)
        finally:
            api.stop()


def _created_key(out: str) -> str:
    match = re.search(r"^x-api-key: (\S+)$", out, re.MULTILINE)
    assert match, out
    return match.group(1)


def test_keys_create_list_revoke(running: Running, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = running.cli(capsys, "keys", "create", "runtime-cli")
    assert code == 0 and "runtime-cli" in out and "only this once" in out
    key = _created_key(out)

    answer = running.post(key, op_id="cli-1")
    assert answer.status_code == 202, answer.text
    assert answer.json()["accepted"] == ["cli-1"]

    code, out, _ = running.cli(capsys, "keys", "list")
    assert code == 0 and "runtime-cli" in out and key not in out  # values are never listed
    code, out, _ = running.cli(capsys, "keys", "list", "--format", "json")
    names = [k["name"] for k in json.loads(out)]
    assert "runtime-cli" in names and "local-agent" in names

    code, out, _ = running.cli(capsys, "keys", "revoke", "runtime-cli")
    assert code == 0 and "revoked 1" in out
    code, out, _ = running.cli(capsys, "keys", "list", "--format", "json")
    assert "runtime-cli" not in [k["name"] for k in json.loads(out)]
    # A local API started now (an empty key cache) refuses the revoked key.
    fresh = LocalApi(running.stack, running.stack.invoker())
    with httpx.Client(base_url=fresh.start(), timeout=30) as client:
        try:
            answer = client.post(
                "/events",
                json={"endpoint": "x", "success": True, "duration_ms": 1},
                headers={"x-api-key": key},
            )
        finally:
            fresh.stop()
    assert answer.status_code == 403

    code, _, err = running.cli(capsys, "keys", "revoke", "runtime-cli")
    assert code == 1 and "no API key named 'runtime-cli'" in err


def test_a_key_revoked_while_the_api_runs_is_refused(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = running.cli(capsys, "keys", "create", "runtime-brief")
    key = _created_key(out)
    assert running.post(key).status_code == 202
    assert running.cli(capsys, "keys", "revoke", "runtime-brief")[0] == 0
    assert running.post(key).status_code == 403


def test_query_json_and_csv(running: Running, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = running.cli(capsys, "keys", "create", "runtime-query")
    key = _created_key(out)
    for i in range(3):
        assert (
            running.post(key, op_id=f"q-{i}", success=i != 1, duration_ms=10.0 * (i + 1)).status_code == 202
        )
    running.drainer.drain()

    sql = (
        "SELECT reporter_id, count(*) AS ops, count_if(NOT success) AS failures FROM ops "
        "WHERE reporter_id = 'runtime-query' GROUP BY reporter_id"
    )
    code, out, err = running.cli(capsys, "query", sql, "--format", "json")
    assert code == 0, err
    assert json.loads(out) == [{"reporter_id": "runtime-query", "ops": 3, "failures": 1}]

    code, out, err = running.cli(capsys, "query", sql, "--format", "csv")
    assert code == 0, err
    assert list(csv.reader(io.StringIO(out))) == [
        ["reporter_id", "ops", "failures"],
        ["runtime-query", "3", "1"],
    ]

    code, out, err = running.cli(capsys, "query", sql)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["reporter_id", "ops", "failures"] and set(lines[1]) <= {"-", " "}
    assert lines[2].split() == ["runtime-query", "3", "1"] and "(1 row, embedded)" in out


def test_a_failing_query_says_why(running: Running, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = running.cli(capsys, "query", "SELECT no_such_column FROM ops")
    assert code == 1 and out == ""
    assert err.startswith("error: query failed:") and "no_such_column" in err


def test_queries_list_and_run(running: Running, capsys: pytest.CaptureFixture[str]) -> None:
    names = sorted(p.stem for p in (ROOT / "queries").glob("*.sql"))
    code, out, _ = running.cli(capsys, "queries", "list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[2:]] == names
    code, out, _ = running.cli(capsys, "queries", "list", "--format", "json")
    assert [q["name"] for q in json.loads(out)] == names and all(q["description"] for q in json.loads(out))

    code, out, err = running.cli(capsys, "queries", "run", "ops_by_source", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert rows and {"source", "reporter_id", "ops", "failures"} <= set(rows[0])

    code, _, err = running.cli(capsys, "queries", "run", "nope")
    assert code == 2 and "no query 'nope'" in err and "ops_by_source" in err


def test_schedule_run_names_the_scheduled_functions(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = running.cli(capsys, "schedule", "run", "EventsFunction")
    assert code == 2 and "no Schedule/ScheduleV2 event" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["query", "SELECT 1"],
        ["queries", "run", "ops_by_source"],
        ["keys", "list"],
        ["keys", "create", "x"],
        ["schedule", "run", "AnyFunction"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_no_running_stack_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code = main(["--state", str(tmp_path / "missing.json"), *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "no local stack is running" in err and "opslake local up" in err


def test_a_stale_state_file_is_no_running_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "local.json"
    stale.write_text(json.dumps({"moto_endpoint": "http://127.0.0.1:9", "environment": {}}))
    assert main(["--state", str(stale), "query", "SELECT 1"]) == 2
    assert "does not answer" in capsys.readouterr().err


@pytest.fixture
def slow_server() -> Iterator[tuple[str, list[str]]]:
    """A loopback server that answers every request after 1.5 s (a busy stack), recording paths."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class Slow(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            threading.Event().wait(1.5)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_busy_stack_is_a_running_stack_and_its_state_is_not_downloaded(
    tmp_path: Path, slow_server: tuple[str, list[str]]
) -> None:
    from opslake_local.cli import running_stack
    from opslake_local.template import find_template

    endpoint, seen = slow_server
    state = tmp_path / "local.json"
    state.write_text(json.dumps({"moto_endpoint": endpoint, "environment": {}}))
    assert running_stack(find_template(None), state) == {"moto_endpoint": endpoint, "environment": {}}
    assert seen and not any("data.json" in request for request in seen)


def test_invoke_with_a_stale_state_file_says_so_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from opslake_local import stack as stack_module

    started: list[object] = []
    monkeypatch.setattr(stack_module.LocalStack, "start", lambda self: started.append(self))
    stale = tmp_path / "local.json"
    stale.write_text(json.dumps({"moto_endpoint": "http://127.0.0.1:9", "environment": {}}))
    assert main(["--state", str(stale), "invoke", "HealthFunction"]) == 2
    err = capsys.readouterr().err
    assert "does not answer" in err and str(stale) in err and "nothing was started" in err
    assert started == []


def test_schedule_run_runs_the_analyzer_now(running: Running, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = running.cli(capsys, "schedule", "run", "AnalyzerFunction")
    assert code == 0, err
    assert json.loads(out)["status"] in ("ok", "nothing_to_do")


def test_playbooks_list_and_approve(running: Running, capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import UTC, datetime

    from opslake.jobs.lease import StateStore
    from opslake.models.playbooks import PlaybookEntry

    s3 = running.stack.client("s3")
    store = StateStore(s3, running.stack.bucket, "state/consolidator.json", lease_s=60)
    lease = store.acquire()
    assert lease is not None
    proposed = PlaybookEntry(
        entry_id="pb_cli_test",
        trigger="SQL question over workers",
        action="Describe the table first (GET /tables/workers)",
        kind="do",
        confidence=0.6,
        domain="sql",
        endpoint="/sql",
        status="proposed",
        evidence_op_ids=["a", "b", "c"],
        evidence_agent_count=3,
        created_at=datetime.now(UTC),
    )
    store.commit(lease, watermark=None, data={"entries": [proposed.model_dump(mode="json")]})

    code, out, _ = running.cli(capsys, "playbooks", "list", "--status", "proposed")
    assert code == 0 and "pb_cli_test" in out and "proposed" in out
    assert "reporters" in out.splitlines()[0]  # independent reporters beside claimed agents
    # issue 16: each entry's experiment: its stage, helpful/harmful verdicts, Δ with its interval
    assert all(column in out.splitlines()[0] for column in ("stage", "helpful/harmful", "Δ [interval]"))
    row = next(line for line in out.splitlines() if "pb_cli_test" in line)
    assert " new " in row and " 0/0 " in row
    code, _, err = running.cli(capsys, "playbooks", "approve", "pb_missing")
    assert code == 2 and "no playbook entry 'pb_missing'" in err
    code, out, err = running.cli(capsys, "playbooks", "approve", "pb_cli_test")
    assert code == 0, err
    snapshot = json.loads(
        s3.get_object(Bucket=running.stack.bucket, Key="playbooks/current.json")["Body"].read()
    )
    assert [e["entry_id"] for e in snapshot["entries"]] == ["pb_cli_test"]
    code, out, _ = running.cli(capsys, "playbooks", "list", "--format", "json")
    assert [(e["entry_id"], e["status"]) for e in json.loads(out)] == [("pb_cli_test", "active")]
    assert json.loads(out)[0]["approved_at"]  # served whatever its reporters, until retired


def test_approving_an_entry_the_fence_refuses_takes_override_fence(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 12 (review): an entry approved before the fence (its endpoint is a network location) could not be
    # approved again once the fence withheld it; the operator may serve it over the fence, recorded
    from datetime import UTC, datetime

    from opslake.jobs.lease import StateStore
    from opslake.models.playbooks import PlaybookEntry

    s3 = running.stack.client("s3")
    store = StateStore(s3, running.stack.bucket, "state/consolidator.json", lease_s=60)
    lease = store.acquire()
    assert lease is not None
    refused = PlaybookEntry(
        entry_id="pb_cli_fence", trigger="searching code", action="Search with the repository named",
        kind="do", confidence=0.6, domain="search", endpoint="10.20.30.40:8443", status="proposed",
        evidence_op_ids=["a", "b", "c"], evidence_agent_count=3, created_at=datetime.now(UTC),
    )  # fmt: skip
    store.commit(lease, watermark=None, data={"entries": [refused.model_dump(mode="json")]})

    code, _, err = running.cli(capsys, "playbooks", "approve", "pb_cli_fence")
    assert code != 0 and "lesson fence" in err and "--override-fence" in err
    code, out, err = running.cli(capsys, "playbooks", "approve", "pb_cli_fence", "--override-fence")
    assert code == 0, err
    assert "served over the lesson fence's refusal: endpoint" in out
    code, out, _ = running.cli(capsys, "playbooks", "list", "--format", "json")
    [entry] = json.loads(out)
    assert entry["status"] == "active" and entry["approved_at"]
    assert entry["fence_override_reason"].startswith("endpoint")
    # the operator may instead retire it: it leaves the snapshot at once
    code, out, err = running.cli(capsys, "playbooks", "retire", "pb_cli_fence")
    assert code == 0 and out.startswith("retired pb_cli_fence"), err
    snapshot = json.loads(
        s3.get_object(Bucket=running.stack.bucket, Key="playbooks/current.json")["Body"].read()
    )
    assert snapshot["entries"] == []
    code, out, _ = running.cli(capsys, "playbooks", "list", "--format", "json")
    assert [(e["entry_id"], e["status"]) for e in json.loads(out)] == [("pb_cli_fence", "retired")]
    code, _, err = running.cli(capsys, "playbooks", "retire", "pb_missing")
    assert code == 2 and "no playbook entry 'pb_missing'" in err


def test_playbooks_export_writes_a_skill_folder_and_one_agents_md_block(
    running: Running, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # issue 16 (an open export): agents that read Agent Skills or AGENTS.md get the lessons without the API
    from datetime import UTC, datetime

    import yaml

    from opslake.jobs.lease import StateStore
    from opslake.models.playbooks import PlaybookEntry

    s3 = running.stack.client("s3")
    store = StateStore(s3, running.stack.bucket, "state/consolidator.json", lease_s=60)
    lease = store.acquire()
    assert lease is not None
    common = {"kind": "do", "confidence": 0.7, "domain": "sql", "evidence_op_ids": ["a", "b", "c"],
              "evidence_reporter_count": 2, "evidence_agent_count": 3, "created_at": datetime.now(UTC)}  # fmt: skip
    # a graduated contrast entry (helpful twice in its holdout experiment) beside a new one
    experiment = {"experiment_stage": "graduated", "holdout_share": 0.05, "helpful_count": 2,
                  "last_verdict": "helpful", "holdout_ops": 38, "holdout_failures": 9, "holdout_rate": 9 / 38,
                  "treatment_ops": 40, "treatment_failures": 3, "treatment_rate": 0.075, "effect": 0.162,
                  "effect_low": 0.009, "effect_high": 0.31, "followed_treatment": 4, "followed_holdout": 1,
                  "instead_of": "SELECT rate FROM workers"}  # fmt: skip
    entries = [
        PlaybookEntry(entry_id="pb_exp_sql", trigger="SQL question over workers", endpoint="/sql",
                      action="Use the column hourly_rate of workers", status="active", **common, **experiment),
        PlaybookEntry(entry_id="pb_exp_worker", trigger="looking up a worker", endpoint="/worker/{id}",
                      action="Use worker ids of the form W00042 ([a](http://x) <b>)", status="active", **common),
        PlaybookEntry(entry_id="pb_exp_proposed", trigger="t", action="not served yet", status="proposed", **common),
    ]  # fmt: skip
    store.commit(lease, watermark=None, data={"entries": [e.model_dump(mode="json") for e in entries]})

    skills = tmp_path / "skills"
    (skills / "other").mkdir(parents=True)
    (skills / "other" / "keep.txt").write_text("not ours")
    code, out, err = running.cli(capsys, "playbooks", "export", str(skills))
    assert code == 0, err
    assert f"exported 2 active entries from the local stack to {skills / 'opslake-playbook'}" in out
    # without --agents-md the block is printed
    assert "<!-- opslake-playbook:start -->\n## Lessons from opslake" in out and "report_followed" in out
    folder = skills / "opslake-playbook"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "SKILL.md", "references/entries.md",
    ]  # fmt: skip
    skill = (folder / "SKILL.md").read_text()
    meta = yaml.safe_load(skill.split("---\n")[1])
    assert meta["name"] == "opslake-playbook" and folder.name == meta["name"]
    assert len(meta["description"]) <= 1024 and "/sql, /worker/{id}" in meta["description"]
    assert (meta["metadata"]["opslake-entries"], meta["metadata"]["opslake-graduated"]) == ("2", "1")
    assert "`pb_exp_sql`" in skill and "`pb_exp_worker`" in skill and "pb_exp_proposed" not in skill
    assert "\\[a\\](http://x) &lt;b&gt;" in skill  # agent-written text stays text
    assert (
        "- **Do** Use the column hourly\\_rate of workers **Instead of** SELECT rate FROM workers"
        not in skill
    )
    assert "- **Do** Use the column hourly_rate of workers **Instead of** SELECT rate FROM workers" in skill
    assert "holdout 23.7 % of 38 ops → treatment 7.5 % of 40 ops (Δ +16.2 pp [+0.9, +31.0])" in skill
    index = (folder / "references" / "entries.md").read_text()
    assert "| stage | held out | helpful | harmful | holdout | treatment | Δ [interval] |" in index
    assert (
        "| `pb_exp_sql` | do | `/sql` | graduated | 5.0 % | 2 | 0 | 23.7 % (9/38) | 7.5 % (3/40) |" in index
    )
    assert "| `pb_exp_worker` | do | `/worker/{id}` | new | 50.0 % | 0 | 0 | - | - | - |" in index
    assert (skills / "other" / "keep.txt").read_text() == "not ours"  # nothing else replaced

    # --graduated-only: only proven entries (the export's readers are outside the experiment)
    only = tmp_path / "graduated"
    code, out, err = running.cli(capsys, "playbooks", "export", str(only), "--graduated-only")
    assert code == 0 and "exported 1 graduated entries" in out, err
    skill = (only / "opslake-playbook" / "SKILL.md").read_text()
    assert "`pb_exp_sql`" in skill and "pb_exp_worker" not in skill
    assert yaml.safe_load(skill.split("---\n")[1])["metadata"]["opslake-graduated"] == "1"
    code, out, _ = running.cli(capsys, "playbooks", "list", "--status", "active")
    row = next(line for line in out.splitlines() if "pb_exp_sql" in line)
    assert " graduated " in row and " 2/0 " in row and "Δ +16.2 pp [+0.9, +31.0]" in row

    agents = tmp_path / "AGENTS.md"
    agents.write_text("# Project\n\nBuild with make.\n")
    for _ in range(2):  # idempotent: the second run replaces the block, never adds one
        code, out, err = running.cli(capsys, "playbooks", "export", str(skills), "--agents-md", str(agents))
        assert code == 0 and f"updated the opslake block in {agents}" in out, err
    text = agents.read_text()
    assert text.startswith("# Project\n\nBuild with make.\n\n<!-- opslake-playbook:start -->\n")
    assert text.count("<!-- opslake-playbook:start -->") == text.count("<!-- opslake-playbook:end -->") == 1
    assert "## Lessons from opslake" in text and "`skills/opslake-playbook/SKILL.md`" in text
    assert "`report_followed`" in text and "regenerated by `opslake playbooks export`" in text
    assert text.endswith("<!-- opslake-playbook:end -->\n")
    # a replaced export loses the entries that are no longer active
    lease = store.acquire()
    assert lease is not None
    store.commit(lease, watermark=None, data={"entries": [entries[0].model_dump(mode="json")]})
    code, _, err = running.cli(capsys, "playbooks", "export", str(skills), "--agents-md", str(agents))
    assert code == 0, err
    assert "pb_exp_worker" not in (folder / "SKILL.md").read_text()
    assert (
        "1 playbook entries" in agents.read_text() and agents.read_text().count("opslake-playbook:start") == 1
    )
    assert sorted(p.name for p in skills.iterdir()) == ["opslake-playbook", "other"]  # no staging left


def test_playbooks_export_refusals(
    running: Running, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = running.cli(capsys, "playbooks", "export", str(tmp_path), "--name", "Bad--Name")
    assert code == 2 and "invalid skill name 'Bad--Name'" in err
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.md").write_text("keep")
    code, _, err = running.cli(capsys, "playbooks", "export", str(tmp_path), "--name", "mine")
    assert code != 0 and "not a previous export" in err
    assert (tmp_path / "mine" / "notes.md").read_text() == "keep"
    agents = tmp_path / "AGENTS.md"
    agents.write_text("<!-- opslake-playbook:start -->\nhalf a block\n")
    code, _, err = running.cli(capsys, "playbooks", "export", str(tmp_path), "--agents-md", str(agents))
    assert code != 0 and "fix it by hand" in err
    assert agents.read_text() == "<!-- opslake-playbook:start -->\nhalf a block\n"


# ---- invoke (sam local invoke's habits) ---------------------------------------------------------
@pytest.fixture
def sent_events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """Every (function, event) the CLI invokes, recorded on the way to the real handler."""
    from opslake_local.invoke import Invoker

    sent: list[tuple[str, object]] = []
    original = Invoker.invoke

    def recording(self: Invoker, logical_id: str, event: object) -> object:
        sent.append((logical_id, event))
        return original(self, logical_id, event)  # type: ignore[arg-type]

    monkeypatch.setattr(Invoker, "invoke", recording)
    return sent


def test_invoke_without_an_event_sends_a_scheduled_function_its_schedule_event(
    running: Running, capsys: pytest.CaptureFixture[str], sent_events: list[tuple[str, object]]
) -> None:
    code, out, err = running.cli(capsys, "invoke", "AnalyzerFunction")
    assert code == 0, err
    assert json.loads(out)["status"] in ("ok", "nothing_to_do")
    ((function, event),) = sent_events
    assert function == "AnalyzerFunction" and isinstance(event, dict)
    # the sample event's shape, with the local stack's rule ARN and the time of the invocation
    fixture = json.loads((ROOT / "events" / "analyzer-schedule.json").read_text())
    template = running.stack.template
    rule = f"rule/{template.stack_name}-AnalyzerFunctionEveryFiveMinutes"
    assert event["resources"] == [f"arn:aws:events:{template.region}:{template.account_id}:{rule}"]
    assert {k: v for k, v in event.items() if k not in ("id", "time", "resources", "version")} == {
        k: v for k, v in fixture.items() if k not in ("id", "time", "resources")
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", event["time"]) and event["id"] != fixture["id"]


def test_invoke_without_an_event_sends_an_api_function_an_empty_event(
    running: Running, capsys: pytest.CaptureFixture[str], sent_events: list[tuple[str, object]]
) -> None:
    running.cli(capsys, "invoke", "HealthFunction")
    assert sent_events == [("HealthFunction", {})]


def test_default_events_follow_the_template() -> None:
    from datetime import UTC, datetime

    from opslake_local.invoke import default_event
    from opslake_local.template import Template, find_template

    template = Template(find_template(None), stack_name="opslake")  # the stack of the sample events
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    event = default_event(template, "AnalyzerFunction", at=epoch)
    fixture = json.loads((ROOT / "events" / "analyzer-schedule.json").read_text())
    assert {k: v for k, v in event.items() if k not in ("id", "version")} == {
        k: v for k, v in fixture.items() if k != "id"
    }
    consolidator = default_event(template, "ConsolidatorFunction", at=epoch)
    assert consolidator["resources"] == [
        f"arn:aws:events:{template.region}:{template.account_id}:rule/opslake-ConsolidatorFunctionEveryThirtyMinutes"
    ]
    assert default_event(template, "HealthFunction") == {} and default_event(template, "WriterFunction") == {}


@pytest.mark.parametrize("flag", ["--event", "-e"])
def test_invoke_reads_the_event_file(running: Running, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    code, out, err = running.cli(
        capsys, "invoke", "HealthFunction", flag, str(ROOT / "events" / "health_get.json")
    )
    assert code == 0, err
    assert json.loads(out)["statusCode"] == 200 and "running local stack" in err


def test_invoke_reads_the_event_from_stdin(
    running: Running, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((ROOT / "events" / "health_get.json").read_text()))
    code, out, err = running.cli(capsys, "invoke", "HealthFunction", "-e", "-")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["statusCode"] == 200 and json.loads(answer["body"])["status"] == "ok"


def test_invoke_with_an_unreadable_event_is_a_usage_error(
    running: Running, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = running.cli(capsys, "invoke", "HealthFunction", "-e", str(tmp_path / "missing.json"))
    assert code == 2 and out == "" and "cannot read the event from" in err
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code, out, err = running.cli(capsys, "invoke", "HealthFunction", "-e", str(broken))
    assert code == 2 and out == "" and "cannot read the event from" in err


def test_invoke_an_unknown_function_names_the_known_ones(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = running.cli(capsys, "invoke", "NoSuchFunction")
    assert code == 2 and "no function 'NoSuchFunction'" in err and "AnalyzerFunction" in err


def test_invoke_ask_uses_the_model_the_shell_names(
    running: Running, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # /ask's 503 says to set OPSLAKE_LLM_BASE_URL and OPSLAKE_LLM_MODEL: locally that is the shell
    # (the template's empty LlmBaseUrl/LlmModel defaults must not override it), as for opslake demo
    from tests.fake_llm import FakeLlm

    with FakeLlm() as llm:
        llm.default = FakeLlm.answer({"answerable": False, "sql": "", "reason": "the catalog cannot say"})
        monkeypatch.setenv("OPSLAKE_LLM_BASE_URL", llm.base_url)
        monkeypatch.setenv("OPSLAKE_LLM_MODEL", llm.model)
        code, out, err = running.cli(
            capsys, "invoke", "AskFunction", "-e", str(ROOT / "events" / "ask_post.json")
        )
        assert code == 0, err
        answer = json.loads(out)
        assert answer["statusCode"] == 200, answer["body"]
        assert json.loads(answer["body"])["status"] == "cannot_answer" and len(llm.completions) == 1


def test_tools_register_then_list_shows_the_catalog_with_client_text_escaped(
    running: Running, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``opslake tools register`` stores an MCP tools/list result; after a consolidator run,
    ``tools list`` shows the registered tool as known before any traffic, and ``--all`` shows what
    one key alone sent, with an escape sequence in an argument's name written out, never sent to
    the terminal. A file that is no tool schema is a usage error that says why."""
    schema = {"tools": [{"name": "book_room", "inputSchema": {"type": "object", "properties": {
        "room_id": {"type": "string", "pattern": "^R[0-9]{3}$"}}, "required": ["room_id"]}}]}  # fmt: skip
    path = tmp_path / "rooms.json"
    path.write_text(json.dumps(schema))
    code, out, err = running.cli(capsys, "tools", "register", str(path))
    assert code == 0, err
    assert "registered 1 tool(s)" in out and "tool:book_room" in out
    (tmp_path / "bad.json").write_text('{"tools": 3}')
    code, _, err = running.cli(capsys, "tools", "register", str(tmp_path / "bad.json"))
    assert code == 2 and "bad.json" in err

    code, out, err = running.cli(capsys, "keys", "create", "runtime-tools")
    assert code == 0, err
    key = _created_key(out)
    hostile = {"\x1b[2Jwipe": 1}
    assert running.post(key, endpoint="tool:odd", input_summary=json.dumps(hostile)).status_code == 202
    running.drainer.drain()
    code, out, err = running.cli(capsys, "schedule", "run", "ConsolidatorFunction")
    assert code == 0, err

    code, out, err = running.cli(capsys, "tools", "list")
    assert code == 0, err
    row = next(line for line in out.splitlines() if "tool:book_room" in line)
    assert "room_id" in row and "yes" in row
    assert "tool:odd" not in out  # one key alone: not known
    code, out, err = running.cli(capsys, "tools", "list", "--all")
    assert code == 0, err
    assert "tool:odd" in out and "\x1b" not in out and "\\x1b[2Jwipe" in out
