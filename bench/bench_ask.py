"""POST /ask over HTTP on the local stack's embedded engine, against the fake model: p50/p95 per path.

The fake OpenAI-compatible server (tests/fake_llm.py) answers at once, so the figures are opslake's
own cost of a question — catalog, prompts, the guarded query, the grounding check, the op records —
not a model's. Each path runs ``--queries`` times after one warm-up call (the first pays the cold
start, shown apart); POST /sql with the same query is the yardstick. In process, the grounding
check alone on 50 rows.

Prints figures; asserts nothing.

    .venv/bin/python bench/bench_ask.py [--queries 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local"), str(ROOT)]

COUNT_SQL = "SELECT city, count(*) AS welders FROM workers WHERE role = 'welder' GROUP BY city ORDER BY 2 DESC LIMIT 10"


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()

    import httpx

    from opslake_local.http import LocalApi
    from opslake_local.stack import QUIET_ENV, LocalStack
    from tests.fake_llm import FakeLlm, Reply

    plan = FakeLlm.answer({"answerable": True, "sql": COUNT_SQL, "reason": "welders per city"})
    cannot = FakeLlm.answer({"answerable": False, "sql": "", "reason": "no table holds salaries"})
    # the top city and its count, read off the rows the query returns (filled in after a /sql call)
    answers: dict[str, Reply] = {}
    cases: dict[str, tuple[str, dict[str, Any], Callable[[FakeLlm], None]]] = {
        "answered (2 model calls, 1 query)": (
            "/ask",
            {"question": "Which city has the most welders?"},
            lambda llm: llm.script(plan, answers["good"]),
        ),
        "refused (3 model calls, 1 query)": (
            "/ask",
            {"question": "Which city has the most welders?"},
            lambda llm: llm.script(plan, answers["bad"], answers["bad"]),
        ),
        "cannot answer (1 model call)": (
            "/ask",
            {"question": "What do welders earn?"},
            lambda llm: llm.script(cannot),
        ),
        "POST /sql, same query (yardstick)": ("/sql", {"sql": COUNT_SQL}, lambda llm: None),
    }

    with FakeLlm() as llm:
        env = {**QUIET_ENV, "OPSLAKE_QUERY_ENGINE": "embedded", "OPSLAKE_LLM_BASE_URL": llm.base_url,
               "OPSLAKE_LLM_MODEL": llm.model}  # fmt: skip
        with LocalStack(env_overrides=env) as stack:
            assert stack.api_key is not None
            api = LocalApi(stack, stack.invoker())
            base_url = api.start()
            try:
                with httpx.Client(
                    base_url=base_url, timeout=120, headers={"x-api-key": stack.api_key.value}
                ) as client:
                    top = client.post("/sql", json={"sql": COUNT_SQL}).json()["rows"][0]
                    answers["good"] = FakeLlm.answer({"answer": f"{top[0]} has the most welders: {top[1]}."})
                    answers["bad"] = FakeLlm.answer({"answer": f"{top[0]} has {top[1] + 13} welders."})

                    def call(path: str, body: dict[str, Any], script: Callable[[FakeLlm], None]) -> float:
                        script(llm)
                        t0 = time.perf_counter()
                        answer = client.post(path, json=body)
                        elapsed = (time.perf_counter() - t0) * 1000
                        assert answer.status_code == 200, answer.text
                        return elapsed

                    first = {name: call(*case) for name, case in cases.items()}
                    print(
                        f"POST /ask over HTTP, local stack, embedded engine, fake model (answers at once), "
                        f"{args.queries} calls each"
                    )
                    for name, case in cases.items():
                        samples = [call(*case) for _ in range(args.queries)]
                        print(
                            f"    {name:36} p50 {pct(samples, 0.5):6.1f} ms  p95 {pct(samples, 0.95):6.1f} ms  "
                            f"mean {statistics.fmean(samples):6.1f} ms  (first call {first[name]:.0f} ms)"
                        )
                    print(f"    model requests the fake received: {len(llm.completions)}")
            finally:
                api.stop()
        # What one round trip to the fake costs by itself (a bare client call), to read the above by.
        from opslake.llm import LlmClient, LlmConfig
        from opslake.tools.ask import AskDraft

        llm.default = FakeLlm.answer({"answer": "x"})
        bare = LlmClient(LlmConfig(base_url=llm.base_url, model=llm.model, max_retries=0))
        trips = []
        for _ in range(args.queries + 1):
            t0 = time.perf_counter()
            bare.complete_json([{"role": "user", "content": "hi"}], AskDraft)
            trips.append((time.perf_counter() - t0) * 1000)
        print(f"    one bare LlmClient call to the fake: p50 {pct(trips[1:], 0.5):.1f} ms")

    from opslake.tools.ask_prompts import prompt_rows
    from opslake.tools.grounding import Evidence, check

    rows = [
        [f"W{i:05d}", "Maria Lopez", "welder", "Houston", "TX", 4.5 + i / 100, 38.25 + i] for i in range(50)
    ]
    answer = "Maria Lopez (W00007) in Houston has a rating of 4.57 and earns $45.25; 50 workers match."
    t0 = time.perf_counter()
    shown = prompt_rows(rows)
    prompt_ms = (time.perf_counter() - t0) * 1000
    samples = []
    for _ in range(200):
        t0 = time.perf_counter()
        check(answer, Evidence.of(shown, texts=["which welders?", COUNT_SQL], row_count=50))
        samples.append((time.perf_counter() - t0) * 1000)
    print(
        f"in process: 50 rows x 7 columns as prompt data {prompt_ms:.1f} ms (first, fence checks warm); "
        f"evidence + grounding check p50 {pct(samples, 0.5):.2f} ms"
    )


if __name__ == "__main__":
    main()
