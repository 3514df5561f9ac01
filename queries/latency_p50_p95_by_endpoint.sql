-- name: latency_p50_p95_by_endpoint
-- description: Median, 95th percentile and worst duration (ms) per endpoint, since yesterday.
SELECT
    endpoint,
    count(*) AS ops,
    approx_percentile(duration_ms, 0.5) AS p50_ms,
    approx_percentile(duration_ms, 0.95) AS p95_ms,
    max(duration_ms) AS max_ms
FROM ops
WHERE dt >= date_format(current_date - interval '1' day, '%Y-%m-%d')
GROUP BY endpoint
ORDER BY p95_ms DESC, endpoint
