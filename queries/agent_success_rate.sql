-- name: agent_success_rate
-- description: Ops, successes, success rate and mean duration per agent since yesterday, worst first.
SELECT
    agent_id,
    count(*) AS ops,
    count_if(success) AS successes,
    round(CAST(count_if(success) AS double) / count(*), 4) AS success_rate,
    round(avg(duration_ms), 1) AS avg_ms
FROM ops
WHERE dt >= date_format(current_date - interval '1' day, '%Y-%m-%d')
GROUP BY agent_id
ORDER BY success_rate, ops DESC, agent_id
