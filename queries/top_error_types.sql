-- name: top_error_types
-- description: The 20 most frequent error types among failed ops since yesterday, with reach and last sighting.
SELECT
    coalesce(error_type, '(none)') AS error_type,
    count(*) AS failures,
    count(DISTINCT endpoint) AS endpoints,
    count(DISTINCT agent_id) AS agents,
    max(ts) AS last_seen
FROM ops
WHERE dt >= date_format(current_date - interval '1' day, '%Y-%m-%d')
  AND NOT success
GROUP BY coalesce(error_type, '(none)')
ORDER BY failures DESC, error_type
LIMIT 20
