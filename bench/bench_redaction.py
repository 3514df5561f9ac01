"""Redaction on gitleaks' secret shapes and on ordinary agent text: misses and false positives.

Plants every secret of tests/data/secrets/corpus.jsonl in every carrier (tests/unit/ingest/secret_carriers.py)
and runs the ops through the ``POST /events`` logic of whichever ``opslake`` package is first on
``sys.path``; then redacts every text of tests/data/secrets/ordinary.jsonl and counts the texts it
changed. Then times (CPU seconds, best of three) hostile 1 MiB bodies, each the most of one kind
of work per byte a client can ask for within the body limits (1 MiB, 500 ops): every gitleaks
keyword, tiny nested encodings, random tokens, secret words, many short attributes. To measure
older code, point ``--package`` at a copy of its ``layers/common``.

    .venv/bin/python bench/bench_redaction.py [--package /tmp/old/layers/common] [--hostile-only]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import runpy
import string
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


MAX_BODY = 1024 * 1024
MAX_OPS = 500


def _op(i: int, **fields: Any) -> dict[str, Any]:
    return {"endpoint": "tool:deploy", "success": False, "duration_ms": 1.0, "op_id": f"o{i}", **fields}


def _texts(piece: Callable[[int], str], chars: int = 2_000) -> str:
    """A 1 MiB body of 500 ops whose ``error`` is ``piece`` repeated (each op a little under 2 KB)."""
    ops = []
    for i in range(MAX_OPS):
        text = ""
        while len(text) < chars:
            text += piece(len(text))
        ops.append(_op(i, error=text[:chars]))
    return json.dumps({"ops": ops})


def hostile_bodies(keywords: list[str], secrets: list[str]) -> dict[str, str]:
    """Bodies at the limits, each maximising one kind of redaction work per byte."""
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits

    def rnd(n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    near = "okta cohere meraki sumo private_ai new_relic linkedin messagebird lob test_ live_ q~ _mmk nrjs- "
    bodies = {
        "corpus secrets, keyed": _texts(lambda n: f"K{n}_SECRET={secrets[n % len(secrets)]} "),
        "every gitleaks keyword": _texts(lambda n: " ".join(keywords) + " "),
        "keywords of unanchored rules": _texts(lambda n: near),
        "one keyword with 5 rules": _texts(lambda n: "twitter "),
        "base64 inside base64": _texts(lambda n: b64("x" + b64(rnd(30))) + " "),
        "base64 inside URL-encoding": _texts(lambda n: "%41" + b64(rnd(12)) + " "),
        "random 20-character tokens": _texts(lambda n: rnd(20) + " "),
        "'password is ...' pairs": _texts(lambda n: f"password is {rnd(6)} "),
        "Bearer + short token": _texts(lambda n: f"Bearer {rnd(4)} "),
    }
    ops = [
        _op(i, attributes={f"k{i}_{j}": f"v{j}" for j in range(50)}, session_id=f"s-{i}-{rnd(10)}")
        for i in range(MAX_OPS)
    ]
    bodies["50 short attributes an op"] = json.dumps({"ops": ops})

    def jointed(pieces: int) -> str:  # no shape, no public id: every joint's window is looked at
        return "-".join(rnd(3) for _ in range(pieces))[:199]

    ids = ("op_id", "session_id", "trace_id", "agent_id")
    ops = [
        _op(i, attributes={f"a{j}_id": jointed(6) for j in range(30)}) | {name: jointed(50) for name in ids}
        for i in range(MAX_OPS)
    ]
    bodies["jointed ids and id attributes (issue 25)"] = json.dumps({"ops": ops})

    def wrapped() -> str:  # 4 base64 tokens wrapping URL-encoding wrapping base64: every level decodes
        return "-".join(b64("%41" + b64(rnd(12)) + "-" + b64(rnd(12))) for _ in range(4))[:199]

    ops = [
        _op(i, attributes={f"a{j}_id": b64("%41" + b64(rnd(9))) for j in range(30)})
        | {name: wrapped() for name in ids}
        for i in range(MAX_OPS)
    ]
    bodies["wrapped ids and id attributes (issue 25)"] = json.dumps({"ops": ops})
    for name, body in bodies.items():
        assert len(body.encode()) <= MAX_BODY, (name, len(body))
    return bodies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--package", default=str(ROOT / "layers/common"), help="folder holding opslake/")
    parser.add_argument("--hostile-only", action="store_true", help="skip the corpus and ordinary text")
    args = parser.parse_args()
    sys.path.insert(0, args.package)
    sys.path.insert(1, str(ROOT / "tests/unit/ingest"))
    from secret_carriers import NOW, load_corpus, load_ordinary, plant, run, summary

    from opslake.ingest.events import ingest
    from opslake.ingest.redact import redact
    from opslake.queue import OpsQueue

    class Queue(OpsQueue):
        def __init__(self) -> None:
            self.messages: list[str] = []

        def send(self, messages: list[str]) -> None:  # type: ignore[override]
            self.messages.extend(messages)

    # The keywords are the attacker's input: taken from this tree's rules whatever package is measured.
    rules = runpy.run_path(str(ROOT / "layers/common/opslake/ingest/provider_rules.py"))["RULES"]
    keywords = sorted({word for rule in rules for word in rule[1]})
    hostile: dict[str, float] = {}
    for name, body in hostile_bodies(keywords, [r["secret"] for r in load_corpus()]).items():
        runs = []
        for _ in range(3):
            started = time.process_time()
            ingest(body, reporter_id="runtime-a", queue=Queue(), received_at=NOW)
            runs.append(time.process_time() - started)
        hostile[name] = round(min(runs), 2)
    if args.hostile_only:
        print(json.dumps({"package": args.package, "hostile_1mib_cpu_seconds": hostile}, indent=1))
        return
    carriers = [c for record in load_corpus() for c in plant(record)]
    started = time.perf_counter()
    result = summary(run(carriers, ingest, Queue))
    result["ingest_seconds"] = round(time.perf_counter() - started, 2)
    texts = load_ordinary()
    started = time.perf_counter()
    changed = [t for t in texts if redact(t) != t]
    result["ordinary_texts"] = len(texts)
    result["ordinary_changed"] = len(changed)
    result["ordinary_ms_per_text"] = round((time.perf_counter() - started) * 1000 / len(texts), 3)
    result["ordinary_changed_examples"] = changed[:5]
    result["hostile_1mib_cpu_seconds"] = hostile
    print(json.dumps({"package": args.package, **result}, indent=1))


if __name__ == "__main__":
    main()
