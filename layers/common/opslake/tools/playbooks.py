"""``GET /playbooks`` as plain logic: the answer to one reader (its selection split by its holdout
arms, as JSON or Markdown), its ``ETag``, and the op record's attributes; the handler only reads
the request and the snapshot and writes the response.

Format: ``?format=`` decides; else Markdown only when ``Accept`` ranks ``text/markdown`` above
``application/json`` (a tie is JSON; nothing is refused, no 406). The ``ETag`` is a hash of the
body, so it changes whenever the snapshot, the selection or the reader's arms do. Stdlib and the
playbook model only: this is on the request path.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from opslake.models.playbooks import HOLDOUT_SALT, PlaybookSnapshot
from opslake.models.tools import PlaybooksQuery
from opslake.tools.playbook_arms import joined_ids, split_arms
from opslake.tools.playbook_markdown import render_entries

MARKDOWN = "text/markdown; charset=utf-8"
JSON = "application/json"


def etag_of(body: str) -> str:
    """A strong validator of one answer's exact bytes."""
    return '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` (``*`` or a list of possibly weak tags) names ``etag``."""
    if not if_none_match:
        return False
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return any(tag == "*" or tag.removeprefix("W/") == etag for tag in tags)


def media_q(accept: str, media_type: str) -> float:
    """The quality ``accept`` (an ``Accept`` header) gives ``media_type``: that of its most specific
    matching range (``type/subtype`` over ``type/*`` over ``*/*``), 0 when none matches."""
    kind = media_type.split("/")[0]
    best: tuple[int, float] = (-1, 0.0)
    for item in accept.split(","):
        parts = [part.strip() for part in item.split(";")]
        media = parts[0].lower()
        specificity = {media_type: 2, f"{kind}/*": 1, "*/*": 0}.get(media)
        if specificity is None or specificity < best[0]:
            continue
        q = 1.0
        for param in parts[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        best = (specificity, q)
    return best[1]


def wants_markdown(query_format: str | None, accept: str | None) -> bool:
    """``?format=`` decides; else Markdown only when ``Accept`` ranks it above JSON (a tie is JSON)."""
    if query_format is not None:
        return query_format == "md"
    if not accept:
        return False
    return media_q(accept, "text/markdown") > media_q(accept, JSON)


@dataclass(frozen=True)
class PlaybooksAnswer:
    """One reader's answer: the body, its format and ``ETag``, and what its op record says
    (``summary`` and ``recorded``: the served and withheld entry ids the consolidator's arms read)."""

    body: str
    markdown: bool
    etag: str
    summary: str
    recorded: dict[str, str | int] = field(default_factory=dict)
    served: int = 0  # entries the reader was given (metric PlaybookEntriesServed)

    @property
    def format(self) -> str:
        return "md" if self.markdown else "json"

    @property
    def content_type(self) -> str:
        return MARKDOWN if self.markdown else JSON

    @property
    def headers(self) -> dict[str, str]:
        # Vary: a cache must not answer a Markdown request with the JSON it kept, nor the reverse;
        # private: the body depends on the key's arms, so no shared cache may hand it to another key
        return {"ETag": self.etag, "Cache-Control": "private, no-cache", "Vary": "Accept"}


def playbooks_answer(
    current: PlaybookSnapshot | None,
    query: PlaybooksQuery,
    *,
    reader: str,
    accept: str | None = None,
    salt: str = HOLDOUT_SALT,
) -> PlaybooksAnswer:
    """The answer to ``reader`` (the caller's API key name): the snapshot's selection for ``query``
    split by the reader's arms (no backfill: a withheld entry answers like an inactive one, so an
    MCP ``resources/read`` of it finds nothing), as Markdown or JSON (:func:`wants_markdown`)."""
    selected = (
        []
        if current is None
        else current.select(
            endpoint=query.endpoint,
            task_class=query.task_class,
            q=query.q,
            entry_id=query.entry_id,  # one entry (an MCP resources/read): still only an active one
            limit=query.limit,
        )
    )
    entries, withheld = split_arms(selected, reader, salt=salt)
    generated_at = current.generated_at.isoformat() if current is not None else None
    summary = f"{len(entries)} entries" if current is not None else "0 entries (no snapshot yet)"
    # which key was served and which was withheld which entries: the consolidator's two arms
    served_ids, served_cut = joined_ids(entries)
    withheld_ids, withheld_cut = joined_ids(withheld)
    recorded: dict[str, str | int] = {"entry_ids": served_ids, "withheld_ids": withheld_ids, "holdout": "1"}
    if served_cut or withheld_cut:  # only ids longer than the consolidator's can overflow
        recorded["ids_cut"] = served_cut + withheld_cut
    markdown = wants_markdown(query.format, accept)
    if markdown:
        body = f"# Playbook entries (generated {generated_at or 'never: no snapshot yet'})\n\n"
        body += render_entries(entries)
    else:
        answer: dict[str, Any] = {"entries": [e.served() for e in entries], "generated_at": generated_at}
        body = json.dumps(answer, separators=(",", ":"), default=str)
    return PlaybooksAnswer(
        body=body,
        markdown=markdown,
        etag=etag_of(body),
        summary=summary,
        recorded=recorded,
        served=len(entries),
    )
