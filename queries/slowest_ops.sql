-- name: slowest_ops
-- description: The 20 slowest ops since yesterday, with who ran them and how they ended.
SELECT
    op_id,
    ts,
    endpoint,
    agent_id,
    success,
    duration_ms,
    error_type
FROM ops
WHERE dt >= date_format(current_date - interval '1' day, '%Y-%m-%d')
ORDER BY duration_ms DESC, op_id
LIMIT 20
