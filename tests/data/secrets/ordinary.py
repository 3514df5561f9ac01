"""Build ordinary.jsonl: text agents send that holds no secret, for the redaction false-positive rate.

Three sources, all from this repository: the planted-failure generator's error texts and request
summaries (bench/planted.py: ids, UUIDs, ULIDs, hex, timestamps, paths, SQL), the simulator's own
strings (local/opslake_local/simulator: mode descriptions, overseer corrections, task texts), and
the messages the opslake package raises or returns (with ``{…}`` filled by a small value). A
text that names a secret word ("x-api-key header") is ordinary as long as it holds no secret.

    python tests/data/secrets/ordinary.py
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).resolve().parent / "ordinary.jsonl"
# Modules whose strings are about secrets by design (rules, examples), not ordinary text.
EXCLUDE = {"redact.py", "provider_rules.py", "sanitize.py"}


def _literal_texts(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    texts: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "42" for v in node.values]
            texts.append("".join(str(p) for p in parts))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            texts.append(node.value)
    return [t for t in texts if len(t) >= 16 and " " in t.strip()]


def build() -> list[dict[str, str]]:
    sys.path.insert(0, str(ROOT / "bench"))
    from planted import generate

    records: dict[str, str] = {}
    data = generate(n_ops=20_000, failure_rate=0.1, seed=12)
    for i in data.failure_indexes():
        records.setdefault(data.columns["error"][i], "bench/planted.py error")
        records.setdefault(data.columns["input_summary"][i], "bench/planted.py input_summary")
    for folder, source in (
        (ROOT / "local/opslake_local/simulator", "simulator"),
        (ROOT / "layers/common/opslake", "opslake messages"),
        (ROOT / "functions", "handler messages"),
    ):
        for path in sorted(folder.rglob("*.py")):
            if path.name in EXCLUDE:
                continue
            for text in _literal_texts(path):
                records.setdefault(text, f"{source}: {path.relative_to(ROOT)}")
    return [{"text": text, "source": source} for text, source in records.items()]


def main() -> None:
    records = build()
    with OUT.open("w") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"{len(records)} ordinary texts -> {OUT}")


if __name__ == "__main__":
    main()
