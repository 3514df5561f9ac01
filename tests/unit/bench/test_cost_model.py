"""bench/cost_model.py: the arithmetic that turns measured figures and a price table into dollars.

The bench itself (bench/bench_cost.py) measures and is never run by tests; these check the rules
of the bill: minimums, rounding, tiers, and that the total follows the prices.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import pytest


def _cost_model() -> Any:
    path = Path(__file__).resolve().parents[3] / "bench" / "cost_model.py"
    spec = importlib.util.spec_from_file_location("bench_cost_model", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


cm = _cost_model()


def inputs(**changes: Any) -> dict[str, Any]:
    """Figures shaped like bench_cost.model_inputs' (values chosen to be easy to check by hand)."""
    base: dict[str, Any] = {
        "architecture": "x86_64",
        "api_type": "REST",
        "tracing": False,
        "log_retention_days": 30,
        "ops_per_request": 10,
        "ingest_duration_s": 0.05,
        "ingest_memory_mb": 1024,
        "ingest_log_bytes": 500,
        "api_access_log_bytes": 500,
        "sqs_send_billed_per_request": 1,
        "writer_batch_ops": 6000,
        "writer_duration_s": 0.5,
        "writer_memory_mb": 1024,
        "writer_log_bytes": 1000,
        "sqs_receive_billed_per_batch": 60,
        "sqs_delete_per_batch": 60,
        "sqs_idle_polls_per_day": 0,
        "s3_puts_per_batch": 1,
        "glue_calls_per_batch": 0,
        "glue_calls_per_athena_query": 3,
        "jobs_measured_rate": 100,
        "jobs": {
            "analyzer": {
                "runs_per_day": 288,
                "duration_s": 2.0,
                "memory_mb": 1024,
                "queries": 3,
                "bytes_per_query": 1_000_000,
                "athena_gets_per_query": 0,
                "s3_puts": 2,
                "s3_gets": 3,
                "glue_calls": 4,
                "log_bytes": 2000,
            },
        },
        "stored_bytes_per_op_day": 100,
        "custom_metrics": 10,
        "alarm_metrics": 48,
        "dashboards": 1,
        "kms_requests_per_op": 0.0,
        "llm_calls_per_day": 100,
        "llm_input_tokens_per_call": 1000,
        "llm_output_tokens_per_call": 500,
    }
    base.update(changes)
    return base


def test_athena_bills_the_ten_megabyte_minimum_per_query() -> None:
    assert cm.athena_billed_bytes(1_000_000) == 10_000_000
    assert cm.athena_billed_bytes(0) == 10_000_000
    assert cm.athena_billed_bytes(25_000_000) == 25_000_000
    # 288 runs x 3 queries of 1 MB each are billed as 10 MB each: 8.64 GB a day at $5/TB
    athena = cm.daily_cost(100, inputs(), cm.PRICES)["Athena"]
    assert athena == pytest.approx(288 * 3 * 10e6 / 1e12 * 5.00)


def test_job_bytes_scale_with_the_rate_above_the_measured_one_only() -> None:
    big = inputs(jobs_measured_rate=10)
    big["jobs"]["analyzer"]["bytes_per_query"] = 20_000_000
    # at 100 ops/s, 10x the measured rate: 200 MB per query, well over the minimum
    assert cm.daily_cost(100, big, cm.PRICES)["Athena"] == pytest.approx(288 * 3 * 200e6 / 1e12 * 5.00)
    # below the measured rate nothing shrinks: still 20 MB per query
    assert cm.daily_cost(5, big, cm.PRICES)["Athena"] == pytest.approx(288 * 3 * 20e6 / 1e12 * 5.00)


def test_sqs_bills_each_started_64_kb_chunk_of_a_call() -> None:
    assert cm.sqs_billed_requests(0) == 1
    assert cm.sqs_billed_requests(65_536) == 1
    assert cm.sqs_billed_requests(65_537) == 2
    assert cm.sqs_billed_requests(262_144) == 4


def test_lambda_duration_rounds_up_to_the_millisecond_at_the_configured_memory() -> None:
    assert cm.lambda_gb_seconds(0.0101, 1024) == pytest.approx(0.011)
    assert cm.lambda_gb_seconds(0.010, 1024) == pytest.approx(0.010)
    assert cm.lambda_gb_seconds(1.0, 2048) == pytest.approx(2.0)


def test_a_price_change_moves_its_service_and_the_total_in_proportion() -> None:
    before = cm.daily_cost(100, inputs(), cm.PRICES)
    prices = copy.deepcopy(cm.PRICES)
    prices["sqs_request"]["price"] *= 2
    after = cm.daily_cost(100, inputs(), prices)
    assert before["SQS"] > 0
    assert after["SQS"] == pytest.approx(2 * before["SQS"])
    assert sum(after.values()) == pytest.approx(sum(before.values()) + before["SQS"])
    assert {k: v for k, v in after.items() if k != "SQS"} == {k: v for k, v in before.items() if k != "SQS"}


def test_requests_per_day_follow_the_ops_packed_per_request() -> None:
    # 100 ops/s in requests of 10 ops: 864,000 REST requests a day
    assert cm.daily_cost(100, inputs(), cm.PRICES)["API Gateway"] == pytest.approx(864_000 * 3.50 / 1e6)
    assert cm.daily_cost(100, inputs(api_type="HTTP"), cm.PRICES)["API Gateway"] == pytest.approx(
        864_000 * 1.00 / 1e6
    )
    assert cm.daily_cost(100, inputs(ops_per_request=100), cm.PRICES)["API Gateway"] == pytest.approx(
        86_400 * 3.50 / 1e6
    )


def test_the_architecture_picks_the_lambda_price() -> None:
    x86 = cm.daily_cost(100, inputs(), cm.PRICES)["Lambda"]
    arm = cm.daily_cost(100, inputs(architecture="arm64"), cm.PRICES)["Lambda"]
    assert arm < x86
    requests = (864_000 + 8_640_000 / 6000 + 288) * 0.20 / 1e6
    assert (x86 - requests) / (arm - requests) == pytest.approx(0.0000166667 / 0.0000133334)


def test_graduated_tiers_price_each_unit_in_its_own_tier() -> None:
    tiers = [(1_000_000, 8 / 100_000), (10_000_000, 7 / 100_000), (math.inf, 6 / 100_000)]
    assert cm.graduated(50_000, tiers, included=100_000) == 0.0
    assert cm.graduated(1_100_000, tiers, included=100_000) == pytest.approx(900_000 * 8e-5 + 100_000 * 7e-5)
    assert cm.graduated(20_000_000, tiers) == pytest.approx(1e6 * 8e-5 + 9e6 * 7e-5 + 10e6 * 6e-5)


def test_a_peer_counts_its_own_billing_unit() -> None:
    per_op = {"base_month": 0.0, "included": 0, "unit": "op", "tiers": [(math.inf, 1e-6)]}
    per_trace = {**per_op, "unit": "trace"}
    both = {**per_op, "unit": "op+trace"}
    ops_day = 10 * 86_400
    assert cm.peer_daily(10, per_op, ops_per_trace=10) == pytest.approx(ops_day * 1e-6)
    assert cm.peer_daily(10, per_trace, ops_per_trace=10) == pytest.approx(ops_day / 10 * 1e-6)
    assert cm.peer_daily(10, both, ops_per_trace=10) == pytest.approx(ops_day * 1.1 * 1e-6)
    with_fee = {**per_op, "base_month": 30.0}
    assert cm.peer_daily(10, with_fee, ops_per_trace=10) == pytest.approx(1.0 + ops_day * 1e-6)


def test_xray_records_the_reservoir_and_five_percent_of_the_rest() -> None:
    assert cm.xray_traces_per_day(0.5) == pytest.approx(0.5 * 86_400)
    assert cm.xray_traces_per_day(21) == pytest.approx(2 * 86_400)
    traced = cm.daily_cost(100, inputs(tracing=True), cm.PRICES)["X-Ray"]
    assert traced > 0
    assert cm.daily_cost(100, inputs(), cm.PRICES)["X-Ray"] == 0


def test_every_price_says_where_it_came_from_and_when() -> None:
    for name, entry in {**cm.PRICES, **cm.PEERS}.items():
        assert entry["source"].startswith("https://"), name
        assert entry["as_of"][:4].isdigit(), name
        assert entry["basis"], name


def test_alarms_bill_each_metric_they_read_and_the_dashboard_a_flat_month_whatever_the_rate() -> None:
    line = "CloudWatch alarms, dashboard"
    low, high = cm.daily_cost(10, inputs(), cm.PRICES), cm.daily_cost(1000, inputs(), cm.PRICES)
    month = 48 * cm.PRICES["alarm_metric_month"]["price"] + cm.PRICES["dashboard_month"]["price"]
    assert low[line] == pytest.approx(month / cm.DAYS_PER_MONTH) == pytest.approx(high[line])
    fewer = cm.daily_cost(10, inputs(alarm_metrics=47, dashboards=0), cm.PRICES)
    assert low[line] - fewer[line] == pytest.approx(
        (cm.PRICES["alarm_metric_month"]["price"] + cm.PRICES["dashboard_month"]["price"]) / cm.DAYS_PER_MONTH
    )
