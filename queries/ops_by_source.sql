-- name: ops_by_source
-- description: Ops and failures per source and reporter (API key name) since yesterday, with the time span seen.
SELECT
    source,
    reporter_id,
    count(*) AS ops,
    count_if(NOT success) AS failures,
    count(DISTINCT agent_id) AS agents,
    min(ts) AS first_ts,
    max(ts) AS last_ts
FROM ops
WHERE dt >= date_format(current_date - interval '1' day, '%Y-%m-%d')
GROUP BY source, reporter_id
ORDER BY ops DESC, source, reporter_id
