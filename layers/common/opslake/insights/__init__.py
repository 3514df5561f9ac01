"""What the lake says about recent ops: ``GET /stats`` (every agent) and ``GET /profile/{agent_id}``
(one agent), each one query over the ``ops`` table shaped into a validated answer."""

from opslake.insights.stats import (
    get_profile,
    get_stats,
    parse_hours,
    profile_from_result,
    profile_sql,
    stats_cache,
    stats_from_result,
    stats_sql,
    validate_agent_id,
)

__all__ = [
    "get_profile",
    "get_stats",
    "parse_hours",
    "profile_from_result",
    "profile_sql",
    "stats_cache",
    "stats_from_result",
    "stats_sql",
    "validate_agent_id",
]
