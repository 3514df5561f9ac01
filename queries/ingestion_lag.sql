-- name: ingestion_lag
-- description: Delay from an op's own time (ts) to its arrival on the queue (ingested_at) per reporter, in ms; negative means the reporter's clock runs ahead.
SELECT
    reporter_id,
    count(*) AS ops,
    min(date_diff('millisecond', ts, ingested_at)) AS min_lag_ms,
    approx_percentile(date_diff('millisecond', ts, ingested_at), 0.5) AS p50_lag_ms,
    approx_percentile(date_diff('millisecond', ts, ingested_at), 0.95) AS p95_lag_ms,
    max(date_diff('millisecond', ts, ingested_at)) AS max_lag_ms
FROM ops
WHERE dt >= date_format(current_date - interval '1' day, '%Y-%m-%d')
GROUP BY reporter_id
ORDER BY p95_lag_ms DESC, reporter_id
