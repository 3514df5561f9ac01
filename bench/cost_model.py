"""The arithmetic of bench_cost.py: measured figures per op and per run, a price table -> dollars.

Pure functions over plain dicts, no I/O, so the arithmetic has unit tests
(tests/unit/bench/test_cost_model.py) while the measurements stay in the bench. Every price carries its
source and the date it was read; ``basis`` says how sure it is: "published" (the vendor's page
or a stored copy of it), "third-party" (a page quoting the vendor, dated), or "knowledge" (the
price as we knew it at ``as_of``, not re-checked offline). No free tier is subtracted anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

SECONDS_PER_DAY = 86_400
DAYS_PER_MONTH = 30  # monthly prices and tiers are spread over 30 days
MB = 1_000_000
GB = 1_000_000_000
TB = 1_000_000_000_000
SQS_CHUNK_BYTES = 64 * 1024  # SQS bills each 64 KB chunk of a request's payload as one request
ATHENA_MIN_BYTES = 10 * MB  # Athena bills at least 10 MB per query

AWS_SOURCE = "https://aws.amazon.com/{}/pricing/"

# us-east-1 list prices, no free tier. ``price`` is dollars per ``unit``.
PRICES: dict[str, dict[str, Any]] = {
    "lambda_gb_s_x86_64": {
        "price": 0.0000166667,
        "unit": "GB-second",
        "source": AWS_SOURCE.format("lambda"),
        "as_of": "2024",
        "basis": "third-party (cloudchipr.com's 2024 copy of the page; first tier, 6B GB-s/month)",
    },
    "lambda_gb_s_arm64": {
        "price": 0.0000133334,
        "unit": "GB-second",
        "source": AWS_SOURCE.format("lambda"),
        "as_of": "2024",
        "basis": "third-party (same copy)",
    },
    "lambda_request": {
        "price": 0.20 / 1e6,
        "unit": "invocation",
        "source": AWS_SOURCE.format("lambda"),
        "as_of": "2024",
        "basis": "third-party (same copy)",
    },
    "apigw_rest_request": {
        "price": 3.50 / 1e6,
        "unit": "request (first 333M/month)",
        "source": AWS_SOURCE.format("api-gateway"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "apigw_http_request": {
        "price": 1.00 / 1e6,
        "unit": "request (first 300M/month, 512 KB each)",
        "source": AWS_SOURCE.format("api-gateway"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "sqs_request": {
        "price": 0.40 / 1e6,
        "unit": "request (each 64 KB chunk), standard queue",
        "source": AWS_SOURCE.format("sqs"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "s3_put": {
        "price": 0.005 / 1000,
        "unit": "PUT/COPY/POST/LIST request, S3 Standard",
        "source": AWS_SOURCE.format("s3"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "s3_get": {
        "price": 0.0004 / 1000,
        "unit": "GET/SELECT request, S3 Standard",
        "source": AWS_SOURCE.format("s3"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "s3_storage": {
        "price": 0.023,
        "unit": "GB-month, S3 Standard first 50 TB",
        "source": AWS_SOURCE.format("s3"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "glue_request": {
        "price": 1.00 / 1e6,
        "unit": "Data Catalog request (over the 1M/month free)",
        "source": AWS_SOURCE.format("glue"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "athena_tb": {
        "price": 5.00,
        "unit": "TB scanned (10 MB minimum per query)",
        "source": AWS_SOURCE.format("athena"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "logs_ingest_gb": {
        "price": 0.50,
        "unit": "GB ingested (standard class)",
        "source": AWS_SOURCE.format("cloudwatch"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "logs_storage_gb_month": {
        "price": 0.03,
        "unit": "GB-month archived",
        "source": AWS_SOURCE.format("cloudwatch"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "alarm_metric_month": {
        "price": 0.10,
        "unit": "standard-resolution alarm metric-month",
        "source": AWS_SOURCE.format("cloudwatch"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "dashboard_month": {
        "price": 3.00,
        "unit": "dashboard-month (beyond the account's first 3)",
        "source": AWS_SOURCE.format("cloudwatch"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "custom_metric_month": {
        "price": 0.30,
        "unit": "metric-month (first 10k metrics)",
        "source": AWS_SOURCE.format("cloudwatch"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "xray_trace": {
        "price": 5.00 / 1e6,
        "unit": "trace recorded",
        "source": AWS_SOURCE.format("xray"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "kms_request": {
        "price": 0.03 / 10_000,
        "unit": "request",
        "source": AWS_SOURCE.format("kms"),
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "llm_input_token": {
        "price": 0.15 / 1e6,
        "unit": "input token (OpenAI gpt-4o-mini, the model we price at)",
        "source": "https://openai.com/api/pricing/",
        "as_of": "2025-06",
        "basis": "knowledge",
    },
    "llm_output_token": {
        "price": 0.60 / 1e6,
        "unit": "output token (gpt-4o-mini)",
        "source": "https://openai.com/api/pricing/",
        "as_of": "2025-06",
        "basis": "knowledge",
    },
}

# Hosted peers: graduated monthly tiers [(units up to, dollars per unit)], a monthly base, and
# what one of their units is in ops (``unit``: "op" = one span/observation/log per op, "trace" =
# one per ``ops_per_trace`` ops, "op+trace" = both counted).
PEERS: dict[str, dict[str, Any]] = {
    "Langfuse Cloud (Core)": {
        "base_month": 29.0,
        "included": 100_000,
        "unit": "op+trace",
        "tiers": [
            (1_000_000, 8 / 100_000),
            (10_000_000, 7 / 100_000),
            (50_000_000, 6.5 / 100_000),
            (math.inf, 6 / 100_000),
        ],
        "source": "https://langfuse.com/pricing",
        "as_of": "2026-06-09",
        "basis": "third-party (usagepricing.com/blueprint/langfuse, 'verified 2026-06-09 from langfuse.com/pricing')",
        "billing_unit": "unit = trace + observation + score",
    },
    "LangSmith (Plus, base traces)": {
        "base_month": 39.0,
        "included": 10_000,
        "unit": "trace",
        "tiers": [(math.inf, 0.50 / 1000)],
        "source": "https://www.langchain.com/pricing",
        "as_of": "2025-06",
        "basis": "knowledge (1 seat; 14-day retention)",
        "billing_unit": "trace (a root run and all its child runs)",
    },
    "LangSmith (Plus, extended traces)": {
        "base_month": 39.0,
        "included": 10_000,
        "unit": "trace",
        "tiers": [(math.inf, 5.00 / 1000)],
        "source": "https://www.langchain.com/pricing",
        "as_of": "2025-06",
        "basis": "knowledge (1 seat; 400-day retention)",
        "billing_unit": "trace",
    },
    "Helicone (usage part)": {
        "base_month": 0.0,
        "included": 10_000,
        "unit": "op",
        "tiers": [
            (30_000, 0.0007),
            (90_000, 0.00035),
            (250_000, 0.000175),
            (800_000, 0.0000875),
            (2_500_000, 0.00004375),
            (math.inf, 0.00002),
        ],
        "source": "https://www.helicone.ai/pricing",
        "as_of": "2026-02-14",
        "basis": "third-party (leeroopedia.com's copy of Helicone's REQUEST_PRICING_TIERS; "
        "storage GB tiers and plan fee left out)",
        "billing_unit": "request log (one per LLM request it proxies)",
    },
    "Datadog LLM Observability": {
        "base_month": 0.0,
        "included": 0,
        "unit": "op",
        "tiers": [(math.inf, 160 / 100_000)],
        "source": "https://www.datadoghq.com/pricing/list/",
        "as_of": "2026-06-08",
        "basis": "third-party (tokenmix.ai: '$160 base' for the first 100K LLM spans a month; the same rate assumed beyond)",
        "billing_unit": "LLM span",
    },
}


def price(prices: Mapping[str, Mapping[str, Any]], name: str) -> float:
    return float(prices[name]["price"])


def athena_billed_bytes(bytes_scanned: float) -> float:
    """What one query is billed for: its bytes, but never less than Athena's 10 MB minimum."""
    return max(float(bytes_scanned), ATHENA_MIN_BYTES)


def sqs_billed_requests(payload_bytes: float) -> int:
    """One SQS API call's billed requests: one per started 64 KB chunk of its payload, at least one."""
    return max(1, math.ceil(payload_bytes / SQS_CHUNK_BYTES))


def lambda_gb_seconds(duration_s: float, memory_mb: int) -> float:
    """One invocation's GB-seconds: the duration rounded up to the millisecond, times the
    configured memory (Lambda bills what is configured, not what is used)."""
    return math.ceil(duration_s * 1000 - 1e-9) / 1000 * memory_mb / 1024


def graduated(units: float, tiers: Sequence[tuple[float, float]], included: float = 0.0) -> float:
    """Dollars for ``units`` under graduated tiers (each unit priced by the tier it falls in);
    ``tiers`` are (upper bound of units, dollars per unit) counted from zero, and the first
    ``included`` units are free (a plan's allowance)."""
    total, lower = 0.0, float(included)
    for upper, rate in tiers:
        if units <= lower:
            break
        if upper <= lower:
            continue
        total += (min(units, upper) - lower) * rate
        lower = upper
    return total


def xray_traces_per_day(requests_per_s: float) -> float:
    """Traces X-Ray records with its default sampling rule: the first request each second (the
    reservoir) and 5 % of the rest."""
    return SECONDS_PER_DAY * (min(1.0, requests_per_s) + 0.05 * max(0.0, requests_per_s - 1.0))


def daily_cost(
    rate: float, m: Mapping[str, Any], prices: Mapping[str, Mapping[str, Any]]
) -> dict[str, float]:
    """Dollars per day, by service, at ``rate`` ops/s, from the measured figures ``m`` (see
    bench_cost.model_inputs for the keys: per request, per writer batch, per job run)."""
    ops_day = rate * SECONDS_PER_DAY
    arch = m["architecture"]
    gb_s = price(prices, f"lambda_gb_s_{arch}")

    requests_day = ops_day / m["ops_per_request"]
    batches_day = ops_day / m["writer_batch_ops"]
    job_runs = m["jobs"]  # name -> {runs_per_day, duration_s, memory_mb, queries, bytes_per_query, ...}

    lam = requests_day * (lambda_gb_seconds(m["ingest_duration_s"], m["ingest_memory_mb"]) * gb_s)
    lam += batches_day * (lambda_gb_seconds(m["writer_duration_s"], m["writer_memory_mb"]) * gb_s)
    invocations = requests_day + batches_day
    for job in job_runs.values():
        lam += job["runs_per_day"] * lambda_gb_seconds(job["duration_s"], job["memory_mb"]) * gb_s
        invocations += job["runs_per_day"]
    lambda_dollars = lam + invocations * price(prices, "lambda_request")

    api_price = price(prices, "apigw_http_request" if m["api_type"] == "HTTP" else "apigw_rest_request")
    sqs_requests = requests_day * m["sqs_send_billed_per_request"]
    sqs_requests += batches_day * (m["sqs_receive_billed_per_batch"] + m["sqs_delete_per_batch"])
    sqs_requests += m["sqs_idle_polls_per_day"]

    s3_puts = batches_day * m["s3_puts_per_batch"]
    s3_gets = 0.0
    glue = batches_day * m["glue_calls_per_batch"]
    athena_bytes = 0.0
    for job in job_runs.values():
        scale = max(1.0, rate / m["jobs_measured_rate"]) if job.get("scales_with_ops", True) else 1.0
        s3_puts += job["runs_per_day"] * job["s3_puts"]
        s3_gets += job["runs_per_day"] * (job["s3_gets"] + job["queries"] * job["athena_gets_per_query"])
        glue += job["runs_per_day"] * (job["glue_calls"] + job["queries"] * m["glue_calls_per_athena_query"])
        athena_bytes += (
            job["runs_per_day"] * job["queries"] * athena_billed_bytes(job["bytes_per_query"] * scale)
        )
    stored_gb = ops_day * m["stored_bytes_per_op_day"] / GB  # GB held, per day of ops (see model_inputs)

    log_bytes = requests_day * (m["ingest_log_bytes"] + m["api_access_log_bytes"])
    log_bytes += batches_day * m["writer_log_bytes"]
    log_bytes += sum(j["runs_per_day"] * j["log_bytes"] for j in job_runs.values())
    log_gb = log_bytes / GB

    llm = m["llm_calls_per_day"] * (
        m["llm_input_tokens_per_call"] * price(prices, "llm_input_token")
        + m["llm_output_tokens_per_call"] * price(prices, "llm_output_token")
    )
    traced = xray_traces_per_day(requests_day / SECONDS_PER_DAY) + xray_traces_per_day(
        batches_day / SECONDS_PER_DAY
    )
    traced += sum(j["runs_per_day"] for j in job_runs.values()) if m["tracing"] else 0.0
    return {
        "Lambda": lambda_dollars,
        "API Gateway": requests_day * api_price,
        "SQS": sqs_requests * price(prices, "sqs_request"),
        "S3 requests": s3_puts * price(prices, "s3_put") + s3_gets * price(prices, "s3_get"),
        "S3 storage": stored_gb * price(prices, "s3_storage") / DAYS_PER_MONTH,
        "Glue": glue * price(prices, "glue_request"),
        "Athena": athena_bytes / TB * price(prices, "athena_tb"),
        "CloudWatch Logs": log_gb * price(prices, "logs_ingest_gb")
        + log_gb * m["log_retention_days"] / DAYS_PER_MONTH * price(prices, "logs_storage_gb_month"),
        "CloudWatch metrics": m["custom_metrics"] * price(prices, "custom_metric_month") / DAYS_PER_MONTH,
        "CloudWatch alarms, dashboard": (
            m.get("alarm_metrics", 0) * price(prices, "alarm_metric_month")
            + m.get("dashboards", 0) * price(prices, "dashboard_month")
        )
        / DAYS_PER_MONTH,
        "X-Ray": (traced if m["tracing"] else 0.0) * price(prices, "xray_trace"),
        "KMS": m["kms_requests_per_op"] * ops_day * price(prices, "kms_request"),
        "LLM (diagnoses)": llm,
    }


def peer_daily(rate: float, peer: Mapping[str, Any], ops_per_trace: float) -> float:
    """A hosted peer's dollars per day at ``rate`` ops/s: its monthly bill for 30 days of that
    volume (plan fee, allowance and graduated tiers), divided by 30."""
    ops_month = rate * SECONDS_PER_DAY * DAYS_PER_MONTH
    traces = ops_month / ops_per_trace
    units = {"op": ops_month, "trace": traces, "op+trace": ops_month + traces}[peer["unit"]]
    return (peer["base_month"] + graduated(units, peer["tiers"], peer["included"])) / DAYS_PER_MONTH
