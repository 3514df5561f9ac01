-- name: failure_rate_by_endpoint_hour
-- description: Ops, failures and failure rate per endpoint and event hour (UTC), since yesterday.
SELECT
    endpoint,
    date_trunc('hour', ts) AS hour_start,
    count(*) AS ops,
    count_if(NOT success) AS failures,
    round(CAST(count_if(NOT success) AS double) / count(*), 4) AS failure_rate
FROM ops
WHERE dt >= date_format(current_date - interval '1' day, '%Y-%m-%d')
GROUP BY endpoint, date_trunc('hour', ts)
ORDER BY hour_start DESC, failure_rate DESC, endpoint
