"""A reader's arms of the playbook holdout experiments (issue 16): which selected entries it is served
and which are withheld, and the id lists its ``GET /playbooks`` op record carries.

The reader is the caller's API key *name* (the op record's ``reporter_id``, see
:func:`opslake.ingest.observe.caller_name`), never a claimed ``agent_id``: a client could rename
itself into an arm. The split comes after the selection (``PlaybookSnapshot.select``), with no
backfill, so an entry is offered at the same rank in both arms and a held-out reader simply gets
fewer entries. Stdlib and the playbook model only: this is on the request path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opslake.models.ops import MAX_ATTRIBUTE_VALUE_CHARS
from opslake.models.playbooks import HOLDOUT_SALT, PlaybookEntry, arm_of


def split_arms(
    entries: Iterable[PlaybookEntry], key_name: str, *, salt: str = HOLDOUT_SALT
) -> tuple[list[PlaybookEntry], list[PlaybookEntry]]:
    """(the entries ``key_name`` is served, those withheld from it), each in the given order."""
    served: list[PlaybookEntry] = []
    withheld: list[PlaybookEntry] = []
    for entry in entries:
        (served if arm_of(key_name, entry, salt) == "treatment" else withheld).append(entry)
    return served, withheld


def visible_entries(
    entries: Iterable[PlaybookEntry], key_name: str, *, salt: str = HOLDOUT_SALT
) -> list[PlaybookEntry]:
    """The entries ``key_name`` may see anywhere (MCP ``resources/list``, ``POST /search``): its
    held-out ones are left out, so they cannot leak through another door. Nothing is recorded there:
    only ``GET /playbooks`` is an exposure."""
    return split_arms(entries, key_name, salt=salt)[0]


def joined_ids(entries: Sequence[PlaybookEntry], limit: int = MAX_ATTRIBUTE_VALUE_CHARS) -> tuple[str, int]:
    """The entry ids comma-joined for an op record attribute, and how many did not fit in ``limit``
    characters. Whole ids only: an id cut by the record's truncation would name no entry. The
    consolidator's ids are 19 characters, so a full selection (50) takes 999 and always fits."""
    kept: list[str] = []
    size = 0
    for entry in entries:
        extra = len(entry.entry_id) + (1 if kept else 0)
        if size + extra > limit:
            break
        kept.append(entry.entry_id)
        size += extra
    return ",".join(kept), len(entries) - len(kept)
