"""The agent tools behind the gateway routes, as plain logic the thin handlers call.

``app`` builds an observed tool resolver; ``sql`` runs one guarded read-only query (``POST /sql``);
``datasets`` answers ``GET /tables``, ``GET /worker/{id}`` and ``POST /match`` over the allowlisted
datasets (ranking in ``matching``); ``snapshots`` serves S3 objects the jobs publish (playbooks,
LLM state) from a per-container cache; ``playbook_arms`` splits a reader's playbook selection into
the entries it is served and those its holdout arms withhold; ``playbook_markdown`` writes active
playbook entries as Markdown (``GET /playbooks?format=md``, ``opslake playbooks export``);
``playbooks`` answers ``GET /playbooks`` (format negotiation, ``ETag``, the arms' op record);
``search`` answers ``POST /search`` (a SQL prefilter, then the BM25 of ``bm25``); ``ask`` answers
``POST /ask`` (a model plans SQL over the catalog, ``sql`` runs it, the model answers from the
rows, ``grounding`` checks the answer against them; prompts in ``ask_prompts``, the model in
``ask_model``); the ``mcp`` package serves every one of these tools over ``POST /mcp`` (MCP's
Streamable HTTP transport) by dispatching each call to the tool's own route.
Names resolve lazily: ``tools.sql`` needs sqlglot, which the other tools' cold starts skip.
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "app": ("create_tool_app", "query_engine"),
        "ask": ("AskAnswer", "AskRequest", "ask", "parse_ask_request"),
        "ask_model": ("LlmAskModel", "ask_model_from_settings"),
        "grounding": ("Evidence", "Grounding", "check"),
        "bm25": ("Document", "Scored", "query_terms", "words"),
        "datasets": (
            "MatchAnswer",
            "MatchRequest",
            "TableCatalog",
            "TableInfo",
            "get_worker",
            "match_workers",
            "parse_match_request",
            "validate_worker_id",
        ),
        "matching": ("Candidate", "Match", "rank"),
        "playbook_arms": ("joined_ids", "split_arms", "visible_entries"),
        "playbook_markdown": ("render_entries", "skill_files"),
        "playbooks": (
            "PlaybooksAnswer",
            "etag_matches",
            "etag_of",
            "media_q",
            "playbooks_answer",
            "wants_markdown",
        ),
        "search": ("SearchAnswer", "SearchRequest", "parse_search_request", "prefilter_sql", "search"),
        "snapshots": (
            "CachedJsonObject",
            "SnapshotUnavailableError",
            "parse_playbook_snapshot",
            "playbook_snapshot",
        ),
        "sql": ("run_sql",),
    },
)
