-- name: agent_success_rate
-- description: Tool calls, successes, success rate and mean duration per agent since yesterday, worst first (agent runs, model calls and reports are not tool calls).
SELECT
    agent_id,
    count(*) AS ops,
    count_if(success) AS successes,
    round(CAST(count_if(success) AS double) / count(*), 4) AS success_rate,
    round(avg(duration_ms), 1) AS avg_ms
FROM ops
WHERE dt >= date_format(current_date - interval '1' day, '%Y-%m-%d')
  AND NOT (endpoint LIKE 'agent:%' OR endpoint LIKE 'model:%')
  AND coalesce(event_kind, '') NOT IN ('log', 'rescue', 'correction')
GROUP BY agent_id
ORDER BY success_rate, ops DESC, agent_id
