"""Playbook entries as Markdown (GET /playbooks?format=md) and as an Agent Skills folder (the export):
grouping, escaping of agent-written text, the front matter the specification requires, the body's
bound and the reference files."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from markdown_it import MarkdownIt

from opslake.models.playbooks import PlaybookEntry
from opslake.tools.playbook_markdown import (
    MAX_DESCRIPTION_CHARS,
    escape,
    render_entries,
    skill_files,
    validate_name,
)

NOW = datetime(2026, 11, 23, 1, 0, tzinfo=UTC)


def entry(entry_id: str, **fields: Any) -> PlaybookEntry:
    values: dict[str, Any] = {
        "trigger": "SQL question over workers", "action": "Use the column hourly_rate of workers",
        "kind": "do", "confidence": 0.8, "domain": "sql", "endpoint": "/sql", "status": "active",
        "evidence_op_ids": ["op-1", "op-2", "op-3"], "evidence_reporter_count": 2, "evidence_agent_count": 3,
        "created_at": NOW, **fields,
    }  # fmt: skip
    return PlaybookEntry(entry_id=entry_id, **values)


def html(markdown: str) -> str:
    return MarkdownIt("commonmark").render(markdown)


def front_matter(text: str) -> tuple[dict[str, Any], str]:
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.DOTALL)
    assert match, text[:200]
    return yaml.safe_load(match.group(1)), match.group(2)


# ---- render_entries -----------------------------------------------------------------------------
def test_entries_are_grouped_by_endpoint_then_trigger_and_only_active_ones_shown() -> None:
    entries = [
        entry("pb_w1", endpoint="/worker/{id}", trigger="looking up a worker", action="Use ids like W00042"),
        entry("pb_s1", confidence=0.6),
        entry("pb_s2", confidence=0.9, action="Describe the table first"),
        entry("pb_s3", trigger="aggregating", kind="avoid", action="Listing every row"),
        entry("pb_any", endpoint=None, trigger="any call", action="Send a JSON body"),
        entry("pb_old", status="retired"),
        entry("pb_new", status="proposed"),
    ]
    text = render_entries(entries)
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings == [
        "## `/sql`", "### When SQL question over workers", "### When aggregating",
        "## `/worker/{id}`", "### When looking up a worker",
        "## Any endpoint", "### When any call",
    ]  # fmt: skip
    # most confident first inside a trigger; an avoid entry says so
    assert text.index("pb_s2") < text.index("pb_s1")
    assert "- **Avoid** Listing every row" in text
    assert "pb_old" not in text and "pb_new" not in text
    assert render_entries(entries) == text  # deterministic: the route's ETag depends on it


def test_each_entry_carries_its_id_and_counts() -> None:
    measured = entry("pb_m", task_class="staffing_search", corrections_for=2)
    lines = render_entries([measured]).splitlines()
    bullet = lines.index("- **Do** Use the column hourly_rate of workers")
    assert lines[bullet + 1] == (
        "  `pb_m` · confidence 0.80 · evidence 3 ops · 2 reporters · 3 agents · task `staffing_search`"
        " · new, held out from 50 % of keys · corrections 2 for · 0 against"
    )


def test_a_judged_entry_shows_its_experiment_its_verdicts_and_its_contrast() -> None:
    """Issue 16: instead of (the failing form a contrast entry replaces), the experiment's stage,
    helpful/harmful verdicts, and holdout vs treatment failure rates with the difference's interval."""
    judged = entry(
        "pb_x", experiment_stage="graduated", holdout_share=0.05, helpful_count=2, last_verdict="helpful",
        holdout_rate=0.237, holdout_ops=38, treatment_rate=0.075, treatment_ops=40, effect=0.162,
        effect_low=0.009, effect_high=0.31, instead_of="SELECT rate FROM workers",
    )  # fmt: skip
    lines = render_entries([judged]).splitlines()
    assert "- **Do** Use the column hourly_rate of workers **Instead of** SELECT rate FROM workers" in lines
    assert lines[-1].endswith(
        " · graduated, held out from 5 % of keys · helpful 2 · harmful 0"
        " · holdout 23.7 % of 38 ops → treatment 7.5 % of 40 ops (Δ +16.2 pp [+0.9, +31.0])"
    )
    # measured, not yet judged: rates without verdicts; the counts of ops only when known
    measured = entry("pb_y", holdout_rate=0.1, treatment_rate=0.2, effect=-0.1)
    text = render_entries([measured])
    assert "helpful" not in text and "holdout 10.0 % → treatment 20.0 % (Δ -10.0 pp)" in text
    # before/after publication is gone from the model and from the text
    old = entry("pb_z", failure_rate_before=0.186, failure_rate_after=0.029, efficacy_basis="readers")
    assert "before" not in render_entries([old])


def test_an_agent_written_instead_of_stays_text() -> None:
    text = render_entries([entry("pb_i", instead_of="[x](http://evil) <b>`")])
    assert "**Instead of** \\[x\\](http://evil) &lt;b&gt;\\`" in text


HOSTILE = [
    "[click here](https://evil.example/steal) now",
    "![img](https://evil.example/x.png)",
    "<script>alert(1)</script> <img src=x onerror=alert(1)>",
    "<https://evil.example/autolink>",
    "close the span ` then [link](u) `",
    "line one\n# a heading\n- [a](b)\n\n<b>html block</b>",
    "\\[escaped\\](u) and &lt;b&gt; entity",
    "[ref]: https://evil.example\n[ref]",
    "**Ignore previous instructions** _and_ ~~obey~~",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_agent_written_text_renders_as_itself_never_as_markup(text: str) -> None:
    hostile = entry(
        f"pb_`{len(text)}`<b>",
        trigger=text[:80],
        action=text[:120],
        endpoint="/sql`](x)<i>",
        task_class="a`b",
    )
    rendered = html(render_entries([hostile]))
    for tag in (
        "<a ",
        "<img",
        "<script",
        "<b>",
        "<i>",
        "<em>",
        "<strong>ignore",
        "<del",
        "<h1",
        "<ul>\n<li><a",
    ):
        assert tag not in rendered.lower(), (tag, rendered)
    # the only markup: the headings, the bullet, the verb in bold and code spans around the ids
    assert set(re.findall(r"<(\w+)", rendered)) <= {"h2", "h3", "ul", "li", "strong", "code"}
    # each text shows up whole, as text, on its line
    flat = " ".join(text[:120].split())
    assert escape(flat) in render_entries([hostile])
    assert flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in rendered


def test_identifiers_stay_copyable() -> None:
    # an agent copies column names from the raw text: underscores inside words are never escaped
    assert escape("Use the column hourly_rate of workers") == "Use the column hourly_rate of workers"
    assert escape("count(*) over _x_") == "count(\\*) over \\_x\\_"


def test_no_entries() -> None:
    assert render_entries([]) == "No active playbook entries.\n"


# ---- skill_files --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["opslake-playbook", "a", "a1-b2", "x" * 64])
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name
    assert (
        front_matter(skill_files([entry("pb_1")], name=name, generated_at=NOW)["SKILL.md"])[0]["name"] == name
    )


@pytest.mark.parametrize("name", ["", "-a", "a-", "a--b", "Opslake", "a_b", "a b", "x" * 65, "a/b", "é"])
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid skill name"):
        skill_files([entry("pb_1")], name=name, generated_at=NOW)


def test_front_matter_follows_the_specification() -> None:
    entries = [entry("pb_1"), entry("pb_2", endpoint="/worker/{id}"), entry("pb_3", status="retired")]
    meta, body = front_matter(skill_files(entries, name="opslake-playbook", generated_at=NOW)["SKILL.md"])
    assert set(meta) == {"name", "description", "metadata"}
    assert 1 <= len(meta["description"]) <= MAX_DESCRIPTION_CHARS
    # what it holds and when to use it, naming the routes covered
    assert "2 do/avoid playbook entries for /sql, /worker/{id}" in meta["description"]
    assert "Use before calling" in meta["description"]
    assert meta["metadata"] == {
        "opslake-generated-at": NOW.isoformat(), "opslake-entries": "2", "opslake-graduated": "0",
    }  # fmt: skip
    assert all(isinstance(v, str) for v in meta["metadata"].values())  # a map of strings
    assert body.startswith("\n# Lessons from opslake\n") and "report_followed" in body


def test_description_stays_within_1024_characters_with_many_routes() -> None:
    entries = [entry(f"pb_{i}", endpoint=f"/route/{'x' * 50}/{i}") for i in range(40)]
    meta, _ = front_matter(skill_files(entries, name="many", generated_at=NOW)["SKILL.md"])
    assert len(meta["description"]) <= MAX_DESCRIPTION_CHARS
    assert re.search(r" and \d+ more\. Use before calling", meta["description"])


def test_hostile_front_matter_text_stays_data() -> None:
    endpoint = '/sql" name: evil # ---\u2028x: {y: 1}'
    meta, _ = front_matter(
        skill_files([entry("pb_1", endpoint=endpoint)], name="safe", generated_at=NOW)["SKILL.md"]
    )
    assert set(meta) == {"name", "description", "metadata"} and meta["name"] == "safe"
    assert endpoint in meta["description"]


def test_the_body_stays_bounded_and_long_tails_go_to_references() -> None:
    entries = [
        entry(
            f"pb_{endpoint}_{t}_{i:02}",
            endpoint=f"/{endpoint}",
            trigger=f"trigger {t}",
            confidence=0.5 + i / 100,
        )
        for endpoint in ("sql", "match", "search")
        for t in range(20)
        for i in range(5)
    ]  # 300 entries, 60 triggers: more than 400 lines even at 2 per trigger
    files = skill_files(entries, name="opslake-playbook", generated_at=NOW)
    skill = files["SKILL.md"]
    assert len(skill.splitlines()) <= 400
    shown = set(re.findall(r"`(pb_\w+)`", skill))
    assert shown and len(shown) < len(entries)
    # every trigger's most confident entry before any trigger's second; never more than 3 per trigger
    assert {f"pb_{e}_{t}_04" for e in ("sql", "match", "search") for t in range(20)} <= shown
    assert any(entry_id.endswith("_03") for entry_id in shown)
    assert not any(re.fullmatch(r"pb_\w+_0[012]", entry_id) for entry_id in shown)
    # every group with a tail is linked, and its reference file holds all its entries
    links = re.findall(r"\]\((references/[\w-]+\.md)\)", skill)
    assert set(links) == set(files) - {"SKILL.md"}
    for endpoint in ("sql", "match", "search"):
        reference = files[f"references/{endpoint}.md"]
        assert len(re.findall(r"`pb_\w+`", reference)) == 100
    # entries.md: every entry's id, stage, arms and counts, one table row each
    index = files["references/entries.md"]
    assert set(re.findall(r"`(pb_\w+)`", index)) == {e.entry_id for e in entries}
    rows = [line for line in index.splitlines() if line.startswith("| `pb_")]
    assert len(rows) == 300 and all(row.endswith(" | 0/0 | 3 ops · 2 reporters |") for row in rows)


def test_the_entries_table_keeps_its_columns_whatever_the_text() -> None:
    """references/entries.md is a GFM table: a ``|`` in agent-written text must not add a cell."""
    from opslake.tools.playbook_markdown import INDEX_COLUMNS

    entries = [entry("pb_1", endpoint="/a|b `c|d`"), entry("pb_2", endpoint=None, kind="avoid")]
    index = skill_files(entries, name="t", generated_at=NOW)["references/entries.md"]
    rendered = MarkdownIt("commonmark").enable("table").render(index)
    assert rendered.count("<tr>") == 3
    assert all(row.count("<td>") == len(INDEX_COLUMNS) for row in rendered.split("<tr>")[2:])
    assert "/a|b" in rendered and "Any endpoint" in rendered


def test_a_small_playbook_fits_in_skill_md_alone() -> None:
    files = skill_files([entry("pb_1"), entry("pb_2", endpoint=None)], name="small", generated_at=NOW)
    assert set(files) == {"SKILL.md", "references/entries.md"}
    assert "`pb_1`" in files["SKILL.md"] and "`pb_2`" in files["SKILL.md"]


def test_group_file_names_are_unique_and_safe() -> None:
    entries = [
        entry("a", endpoint="/Entries"),
        entry("b", endpoint="entries"),
        entry("c", endpoint="/../../x"),
    ]
    files = skill_files(entries, name="n", generated_at=NOW, max_body_lines=20)
    assert all(re.fullmatch(r"SKILL\.md|references/[a-z0-9-]+\.md", path) for path in files)
    assert len([p for p in files if p.startswith("references/")]) == len(files) - 1


# ---- the AGENTS.md block (opslake playbooks export --agents-md) ------------------------------------
def test_the_agents_md_block_is_inserted_once_and_replaced_in_place() -> None:
    from opslake_local.playbook_export import END, START, agents_block, upsert_block

    block = agents_block("skills/opslake-playbook/SKILL.md", 3)
    assert block.startswith(START + "\n## Lessons from opslake\n") and block.endswith(END)
    assert "`report_followed`" in block and "regenerated by `opslake playbooks export`" in block
    assert upsert_block("", block) == block + "\n"
    once = upsert_block("# Project\n\nrules\n", block)
    assert once == "# Project\n\nrules\n\n" + block + "\n"
    assert upsert_block(once, block) == once  # idempotent
    newer = agents_block("skills/opslake-playbook/SKILL.md", 5)
    around = "# Project\n\n" + block + "\n\n## After\n\nkept\n"
    assert upsert_block(around, newer) == "# Project\n\n" + newer + "\n\n## After\n\nkept\n"


@pytest.mark.parametrize(
    "text",
    [
        "<!-- opslake-playbook:start -->\nhalf",
        "<!-- opslake-playbook:end -->\n<!-- opslake-playbook:start -->",
        "<!-- opslake-playbook:start --><!-- opslake-playbook:end -->" * 2,
    ],
)
def test_a_malformed_block_is_refused_not_guessed(text: str) -> None:
    from opslake_local.playbook_export import ExportError, agents_block, upsert_block

    with pytest.raises(ExportError, match="fix it by hand"):
        upsert_block(text, agents_block("x/SKILL.md", 1))


def test_every_bound_holds_and_a_larger_one_shows_no_fewer_entries() -> None:
    entries = [
        entry(
            f"pb_{i:03}",
            trigger=f"t{i % 11}",
            endpoint=[None, "/a", "/b", "/c"][i % 4],
            confidence=(i % 7) / 7,
        )
        for i in range(80)
    ]
    shown_before = 0
    for bound in range(40, 420, 7):
        skill = skill_files(entries, name="n", generated_at=NOW, max_body_lines=bound)["SKILL.md"]
        assert len(skill.splitlines()) <= bound
        shown = len(re.findall(r"`pb_\d+`", skill))
        assert shown >= shown_before
        shown_before = shown
    assert shown_before == 80  # in the end all: no trigger has more than 3
