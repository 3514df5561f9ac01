"""Redaction on gitleaks' secret shapes and on ordinary agent text: misses and false positives.

Plants every secret of tests/data/secrets/corpus.jsonl in every carrier (tests/unit/secret_carriers.py)
and runs the ops through the ``POST /events`` logic of whichever ``opslake`` package is first on
``sys.path``; then redacts every text of tests/data/secrets/ordinary.jsonl and counts the texts it
changed. To measure older code, point ``--package`` at a copy of its ``layers/common``.

    .venv/bin/python bench/bench_redaction.py [--package /tmp/old/layers/common]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--package", default=str(ROOT / "layers/common"), help="folder holding opslake/")
    args = parser.parse_args()
    sys.path.insert(0, args.package)
    sys.path.insert(1, str(ROOT / "tests/unit"))
    from secret_carriers import load_corpus, load_ordinary, plant, run, summary

    from opslake.ingest.events import ingest
    from opslake.ingest.redact import redact
    from opslake.queue import OpsQueue

    class Queue(OpsQueue):
        def __init__(self) -> None:
            self.messages: list[str] = []

        def send(self, messages: list[str]) -> None:  # type: ignore[override]
            self.messages.extend(messages)

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
    print(json.dumps({"package": args.package, **result}, indent=1))


if __name__ == "__main__":
    main()
