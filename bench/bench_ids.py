"""Ids kept as sent (issue 25): how many ids of each common form the redactor rewrites, and how
many planted credentials it still catches, for whichever ``opslake`` package is first on ``sys.path``.

The ids are tests/data/ids/id_forms.py's (11,200 of 28 forms, fixed seed), each measured

* as an identifying id (``redact_identifier``: op, session, trace, agent ids),
* through ``POST /events`` (the ingest logic: op_id, session_id and trace_id of an op),
* standing alone in text (``redact``), and
* inside its text (a log line, an error or a JSON blob; plus 200 ``data:image`` URIs).

The credentials are tests/data/secrets/corpus.jsonl's, planted in every carrier of
tests/unit/ingest/secret_carriers.py through the same ingest logic (as bench_redaction.py does): the
required placements (a secret named by its key or with a shape of its own), and gitleaks'
context-only secrets standing alone, in text and in ids. To measure older code, point
``--package`` at a copy of its ``layers/common`` (``git archive <commit> layers/common | tar -x -C /tmp/old``).

    .venv/bin/python bench/bench_ids.py [--package /tmp/old/layers/common] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _id_forms() -> Any:
    spec = importlib.util.spec_from_file_location("id_forms", ROOT / "tests/data/ids/id_forms.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def through_local_stack(per_form: int) -> dict[str, Any]:
    """Ops posted to ``POST /events`` of a local stack (moto server, embedded engine) with an id of
    each form as op_id and session_id, drained into the lake and read back with ``POST /sql``:
    how many come back unlike they were sent. Runs the code of the tree this file is in (the
    handlers are loaded from its functions/): to measure older code, run an older tree's copy."""
    import httpx

    from opslake_local.drain import Drainer
    from opslake_local.http import LocalApi
    from opslake_local.stack import QUIET_ENV, LocalStack

    forms = _id_forms()
    ids = list(forms.ids(per_form=per_form))
    rewritten: Counter[str] = Counter()
    with LocalStack(env_overrides={**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded"}) as stack:
        invoker = stack.invoker()
        api = LocalApi(stack, invoker)
        base_url = api.start()
        key = {"x-api-key": stack.create_api_key("ids-bench").value}
        try:
            with httpx.Client(base_url=base_url, timeout=120) as client:
                for start in range(0, len(ids), 250):
                    ops = [
                        {
                            "endpoint": "tool:lookup",
                            "success": True,
                            "duration_ms": 1.0,
                            "agent_id": "ids-bench",
                        }
                        | {"op_id": value, "session_id": value}
                        for _, value in ids[start : start + 250]
                    ]
                    answer = client.post("/events", json={"ops": ops}, headers=key)
                    assert answer.status_code == 202, answer.text
                drained = Drainer(stack, invoker).drain()
                assert drained.failed == 0, drained
                rows: list[dict[str, Any]] = []
                for form in forms.FORMS:
                    # found by the id it was sent under, as a client would look for it
                    sent = ", ".join(repr(value) for f, value in ids if f == form)
                    sql = f"SELECT op_id, session_id FROM ops WHERE agent_id = 'ids-bench' AND session_id IN ({sent})"
                    answer = client.post("/sql", json={"sql": sql}, headers=key)
                    assert answer.status_code == 200, answer.text[:300]
                    rows.extend(answer.json()["rows"])
        finally:
            api.stop()
    back = {(row[0], row[1]) for row in rows}
    for form, value in ids:
        if (value, value) not in back:
            rewritten[form] += 1
    return {
        "posted": len(ids),
        "read_back_as_sent": len(ids) - sum(rewritten.values()),
        "rewritten": dict(rewritten),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--package", default=str(ROOT / "layers/common"), help="folder holding opslake/")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--local", type=int, metavar="PER_FORM", help="only: ids through a local stack")
    args = parser.parse_args()
    sys.path.insert(0, args.package)
    sys.path.insert(1, str(ROOT / "tests/unit/ingest"))
    if args.local:
        sys.path.insert(1, str(ROOT / "local"))
        print(json.dumps(through_local_stack(args.local), indent=1))
        return
    from secret_carriers import NOW, load_corpus, plant, run, summary

    from opslake.ingest.events import ingest
    from opslake.ingest.redact import redact, redact_identifier
    from opslake.queue import OpsQueue

    class Queue(OpsQueue):
        def __init__(self) -> None:
            self.messages: list[str] = []

        def send(self, messages: list[str]) -> None:  # type: ignore[override]
            self.messages.extend(messages)

    forms = _id_forms()
    ids: list[tuple[str, str]] = list(forms.ids())
    texts: list[tuple[str, str]] = list(forms.texts())
    total: Counter[str] = Counter(form for form, _ in texts)
    as_id: Counter[str] = Counter(form for form, value in ids if redact_identifier(value) != value)
    alone: Counter[str] = Counter(form for form, value in ids if redact(value) != value)
    in_text: Counter[str] = Counter(form for form, text in texts if redact(text) != text)
    ingested: Counter[str] = Counter()  # op_id or session_id or trace_id stored unlike sent
    for start in range(0, len(ids), 500):
        batch = ids[start : start + 500]
        ops = [
            {"endpoint": "tool:lookup", "success": True, "duration_ms": 1.0, "op_id": f"o{start + i}"}
            | {"session_id": value, "trace_id": value}
            for i, (_, value) in enumerate(batch)
        ]
        # op_id carries the id too, in a second request (one op per id: the dedupe key must differ)
        queue = Queue()
        ingest(json.dumps({"ops": ops}), reporter_id="bench", queue=queue, received_at=NOW)
        stored = {json.loads(m)["op_id"]: json.loads(m) for m in queue.messages}
        queue = Queue()
        plain = [
            {k: v for k, v in op.items() if k not in ("session_id", "trace_id")} | {"op_id": value}
            for op, (_, value) in zip(ops, batch, strict=True)
        ]
        ingest(json.dumps({"ops": plain}), reporter_id="bench", queue=queue, received_at=NOW)
        kept_ops = {json.loads(m)["op_id"] for m in queue.messages}
        for i, (form, value) in enumerate(batch):
            record = stored.get(f"o{start + i}", {})
            if record.get("session_id") != value or record.get("trace_id") != value or value not in kept_ops:
                ingested[form] += 1

    carriers = [c for record in load_corpus() for c in plant(record)]
    caught = summary(run(carriers, ingest, Queue))
    rows = [
        {
            "form": form,
            "ids": total[form] if form != "data_uri" else 0,
            "as_id": as_id[form],
            "post_events": ingested[form],
            "alone_in_text": alone[form],
            "in_text": in_text[form],
        }
        for form in total
    ]
    result = {
        "package": args.package,
        "ids": len(ids),
        "texts": len(texts),
        "rewritten": {
            "as_id": sum(as_id.values()),
            "post_events": sum(ingested.values()),
            "alone_in_text": sum(alone.values()),
            "in_text": sum(in_text.values()),
        },
        "credentials": {
            key: caught[key]
            for key in (
                "secrets",
                "placements",
                "required_placements",
                "required_missed",
                "context_text_placements",
                "context_text_missed",
                "context_id_placements",
                "context_id_missed",
            )
        },
        "by_form": rows,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"package {args.package}: {len(ids)} ids, {len(texts)} texts")
    print(f"{'form':18} {'ids':>5} {'as id':>6} {'/events':>8} {'alone':>6} {'in text':>8}")
    for row in rows:
        print(
            f"{row['form']:18} {row['ids']:>5} {row['as_id']:>6} {row['post_events']:>8} "
            f"{row['alone_in_text']:>6} {row['in_text']:>8}"
        )
    print("rewritten:", json.dumps(result["rewritten"]))
    print("credentials:", json.dumps(result["credentials"]))


if __name__ == "__main__":
    main()
