"""Commands that manage a stack's contents: ``keys`` (API keys of the usage plan), ``playbooks``
(the consolidator's entries) and ``dataset load`` (the staffing sample tables), on the local stack
or, with ``--aws``, on the deployed one."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from opslake_local.cli.target import (
    CliError,
    Commands,
    aws_client,
    aws_options,
    local_client,
    require_stack,
    stack_output,
)

if TYPE_CHECKING:  # the models load lazily: the CLI's other commands do not need them
    from opslake.models.playbooks import PlaybookEntry


# ---- keys ---------------------------------------------------------------------------------------
def _keys_target(args: argparse.Namespace) -> tuple[Any, str, str]:
    """(API Gateway client, usage plan id, where) for the local stack or, with --aws, AWS."""
    if args.aws:
        plan = stack_output(args, "ApiUsagePlanId")
        return aws_client("apigateway", args.region), plan, f"stack {args.stack_name}"
    state = require_stack(args)
    local_plan = state.get("usage_plan_id")
    if not local_plan:
        raise CliError("the running local stack recorded no usage plan; restart `opslake local up`")
    return local_client(state, "apigateway"), str(local_plan), f"local stack {state['moto_endpoint']}"


def cmd_keys_create(args: argparse.Namespace) -> int:
    """Create an API key (its name becomes reporter_id) in the usage plan; print its value once."""
    from opslake_local.stack import create_plan_key

    client, plan, where = _keys_target(args)
    key = create_plan_key(client, plan, args.name)
    print(f"created API key {key.name!r} (id {key.id}) in usage plan {plan} of the {where}")
    print(f"x-api-key: {key.value}")
    print("(the value is shown only this once: store it now)")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    """The usage plan's keys (never their values)."""
    from opslake_local.console import text_table
    from opslake_local.queries import cell_text
    from opslake_local.stack import plan_keys

    client, plan, _where = _keys_target(args)
    keys = plan_keys(client, plan)
    if args.format == "json":
        print(json.dumps(keys, indent=2, default=str))
    else:
        rows = [(k["name"], k["id"], "yes" if k["enabled"] else "no", k["created"]) for k in keys]
        print(text_table(["name", "id", "enabled", "created"], rows, cell=cell_text))
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    """Delete the usage plan's keys with this name: requests with them get 403 from then on."""
    from opslake_local.stack import revoke_plan_keys

    client, plan, _where = _keys_target(args)
    revoked = revoke_plan_keys(client, plan, args.name)
    if not revoked:
        raise CliError(f"no API key named {args.name!r} in usage plan {plan}")
    print(f"revoked {len(revoked)} API key(s) named {args.name!r}: {', '.join(revoked)}")
    return 0


def add_keys(commands: Commands) -> None:
    keys = commands.add_parser(
        "keys", help="API keys of the usage plan (local stack, or --aws)"
    ).add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser(
        "create", help="create a key (its name becomes reporter_id); prints the value once"
    )
    create.add_argument("name")
    aws_options(create, "usage plan")
    create.set_defaults(func=cmd_keys_create)
    key_list = keys.add_parser("list", help="the usage plan's keys (without values)")
    key_list.add_argument("--format", choices=("table", "json"), default="table")
    aws_options(key_list, "usage plan")
    key_list.set_defaults(func=cmd_keys_list)
    revoke = keys.add_parser("revoke", help="delete the keys with this name (403 from then on)")
    revoke.add_argument("name")
    aws_options(revoke, "usage plan")
    revoke.set_defaults(func=cmd_keys_revoke)


# ---- playbooks ----------------------------------------------------------------------------------
def _playbooks_target(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """(settings, S3 client, where) of the local stack's lake, or the deployed one with --aws."""
    from opslake.config import Settings

    if args.aws:
        bucket = stack_output(args, "LakeBucketName")
        return Settings(lake_bucket=bucket), aws_client("s3", args.region), f"stack {args.stack_name}"
    state = require_stack(args)
    return Settings(lake_bucket=str(state["bucket"])), local_client(state, "s3"), "local stack"


def _consolidator_state(settings: Any, s3: Any) -> Any:
    from opslake.jobs.lease import StateStore

    return StateStore(
        s3, settings.lake_bucket, settings.consolidator_state_key, lease_s=settings.consolidator_lease_s
    )


def cmd_playbooks_list(args: argparse.Namespace) -> int:
    """Every playbook entry the consolidator keeps (proposed, active, retired), newest first."""
    from opslake.jobs.consolidator import read_entries
    from opslake_local.console import text_table
    from opslake_local.queries import cell_text

    settings, s3, _where = _playbooks_target(args)
    entries = [e for e in read_entries(_consolidator_state(settings, s3)) if args.status in (None, e.status)]
    entries.sort(key=lambda e: e.created_at, reverse=True)
    if args.format == "json":
        print(
            json.dumps([e.model_dump(mode="json", exclude={"evidence_excerpts"}) for e in entries], indent=2)
        )
        return 0
    from opslake.tools.playbook_markdown import effect_text

    rows = [
        (
            e.entry_id,
            e.status,
            e.experiment_stage,
            e.kind,
            f"{e.confidence:.2f}",
            f"{e.helpful_count}/{e.harmful_count}",
            effect_text(e) or "-",
            e.evidence_reporter_count,
            e.evidence_agent_count,
            e.endpoint or "-",
            e.action[:70],
        )
        for e in entries
    ]
    # reporters: independent API keys (by trust level) behind the evidence; agents: claimed agent_ids;
    # helpful/harmful: the experiment's verdicts; Δ: holdout minus treatment failure rate [interval]
    header = [
        "entry_id", "status", "stage", "kind", "confidence", "helpful/harmful", "Δ [interval]",
        "reporters", "agents", "endpoint", "action",
    ]  # fmt: skip
    print(text_table(header, rows, cell=cell_text))
    return 0


def _change_entry(
    args: argparse.Namespace, change: Callable[..., PlaybookEntry], **options: Any
) -> tuple[PlaybookEntry, str]:
    """Run an operator's change of one entry (``approve_entry`` or ``retire_entry``) on the target
    stack, under the consolidator's lock, with the CLI's errors; the changed entry and where."""
    from opslake.analysis.playbooks import EntryNotFoundError
    from opslake.jobs.lease import LeaseLostError
    from opslake.lake.store import S3ObjectStore

    settings, s3, where = _playbooks_target(args)
    try:
        entry = change(
            settings,
            S3ObjectStore(s3, settings.lake_bucket),
            _consolidator_state(settings, s3),
            args.entry_id,
            now=datetime.now(UTC),
            **options,
        )
    except EntryNotFoundError as exc:
        raise CliError(f"no playbook entry {args.entry_id!r} (see `opslake playbooks list`)", 2) from exc
    except (ValueError, LeaseLostError) as exc:
        raise CliError(str(exc)) from exc
    return entry, where


def cmd_playbooks_approve(args: argparse.Namespace) -> int:
    """Publish a proposed entry (approval mode, or evidence from too few independent reporters): it
    reaches agents with the next GET /playbooks and stays served whatever its evidence until retired."""
    from opslake.jobs.consolidator import approve_entry
    from opslake_local.cli.tools_commands import read_tables

    # the fence judges the entry with the last run's catalog and the target's tables and columns
    entry, where = _change_entry(
        args, approve_entry, override_fence=args.override_fence, tables=read_tables(args)
    )
    print(f"approved {entry.entry_id} in the {where}: {entry.kind} - {entry.trigger} -> {entry.action}")
    if entry.fence_override_reason:
        print(f"served over the lesson fence's refusal: {entry.fence_override_reason}")
    return 0


def cmd_playbooks_retire(args: argparse.Namespace) -> int:
    """Stop serving an entry for good (say, an approved one a consolidator run reports as refused by
    the lesson fence): it leaves GET /playbooks at once and is never revived."""
    from opslake.jobs.consolidator import retire_entry

    entry, where = _change_entry(args, retire_entry)
    print(f"retired {entry.entry_id} in the {where}: {entry.kind} - {entry.trigger} -> {entry.action}")
    return 0


def cmd_playbooks_export(args: argparse.Namespace) -> int:
    """Write the active entries (--graduated-only: only the graduated ones) as an Agent Skills folder
    DIR/NAME (replacing the previous export of that name), and the AGENTS.md block pointing to it:
    into --agents-md, or printed."""
    from pathlib import Path

    from opslake.jobs.consolidator import read_entries
    from opslake.tools.playbook_markdown import skill_files, validate_name
    from opslake_local.playbook_export import ExportError, agents_block, update_agents_md, write_skill_folder

    try:
        validate_name(args.name)
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc
    settings, s3, where = _playbooks_target(args)
    entries = [e for e in read_entries(_consolidator_state(settings, s3)) if e.status == "active"]
    if args.graduated_only:  # only entries proven helpful: the export's readers are outside the experiment
        entries = [e for e in entries if e.experiment_stage == "graduated"]
    files = skill_files(entries, name=args.name, generated_at=datetime.now(UTC))
    try:
        folder = write_skill_folder(Path(args.directory), args.name, files)
        if args.agents_md:
            update_agents_md(Path(args.agents_md), folder / "SKILL.md", len(entries))
    except (ExportError, OSError) as exc:
        raise CliError(str(exc)) from exc
    which = "graduated" if args.graduated_only else "active"
    print(
        f"exported {len(entries)} {which} entries from the {where} to {folder}"
        f" (SKILL.md, {len(files) - 1} reference files)"
    )
    if args.agents_md:
        print(f"updated the opslake block in {args.agents_md}")
    else:
        block = agents_block((folder / "SKILL.md").as_posix(), len(entries))
        print(f"\nadd this to your AGENTS.md (or rerun with --agents-md PATH):\n\n{block}")
    return 0


def add_playbooks(commands: Commands) -> None:
    playbooks = commands.add_parser(
        "playbooks", help="playbook entries (local stack, or --aws)"
    ).add_subparsers(dest="playbooks_command", required=True)
    playbook_list = playbooks.add_parser("list", help="every entry the consolidator keeps, newest first")
    playbook_list.add_argument("--status", choices=("proposed", "active", "retired"), default=None)
    playbook_list.add_argument("--format", choices=("table", "json"), default="table")
    aws_options(playbook_list, "usage plan")
    playbook_list.set_defaults(func=cmd_playbooks_list)
    approve = playbooks.add_parser(
        "approve", help="publish a proposed entry (approval mode, or too few independent reporters)"
    )
    approve.add_argument("entry_id")
    approve.add_argument(
        "--override-fence",
        action="store_true",
        help="approve an entry whose text the lesson fence refuses (you read it; the refusal is recorded)",
    )
    aws_options(approve, "usage plan")
    approve.set_defaults(func=cmd_playbooks_approve)
    retire = playbooks.add_parser("retire", help="stop serving an entry for good (never revived)")
    retire.add_argument("entry_id")
    aws_options(retire, "usage plan")
    retire.set_defaults(func=cmd_playbooks_retire)
    export = playbooks.add_parser(
        "export", help="write the active entries as an Agent Skills folder (DIR/NAME/SKILL.md) for agents"
    )
    export.add_argument("directory", metavar="DIR", help="where the skill folder goes (e.g. .agents/skills)")
    export.add_argument("--name", default="opslake-playbook", help="the skill's name and folder name")
    export.add_argument(
        "--agents-md",
        metavar="PATH",
        default=None,
        help="insert or replace the opslake block in this AGENTS.md",
    )
    export.add_argument(
        "--graduated-only",
        action="store_true",
        help="export only graduated entries (helpful with confidence in their holdout experiment); the "
        "export's readers are outside the experiment, so new entries stay measurable",
    )
    aws_options(export, "lake")
    export.set_defaults(func=cmd_playbooks_export)


# ---- dataset ------------------------------------------------------------------------------------
def cmd_dataset_load(args: argparse.Namespace) -> int:
    """Write the staffing sample dataset (workers, placements) as Parquet to the stack's lake bucket."""
    from opslake_local.console import progress
    from opslake_local.dataset import TABLES, load_dataset

    if args.aws:
        bucket = stack_output(args, "LakeBucketName")
        client, where = aws_client("s3", args.region), f"stack {args.stack_name}"
    else:
        state = require_stack(args)
        bucket, where = str(state["bucket"]), f"local stack {state['moto_endpoint']}"
        client = local_client(state, "s3")
    try:
        with progress("dataset", 1 + len(TABLES)) as step:
            loaded = load_dataset(client, bucket, seed=args.seed, workers=args.workers, on_step=step)
    except ValueError as exc:
        raise CliError(str(exc), 2) from exc
    for table in loaded:
        print(f"{table.table}: {table.rows} rows -> s3://{bucket}/{table.key} ({table.bytes} bytes)")
    print(f"loaded the staffing dataset (seed {args.seed}) into the {where}")
    return 0


def add_dataset(commands: Commands) -> None:
    dataset = commands.add_parser("dataset", help="the staffing sample dataset").add_subparsers(
        dest="dataset_command", required=True
    )
    dataset_load = dataset.add_parser(
        "load", help="write workers and placements as Parquet to the lake bucket (local stack, or --aws)"
    )
    dataset_load.add_argument("--seed", type=int, default=42, help="generator seed (default 42)")
    dataset_load.add_argument("--workers", type=int, default=3000, help="how many workers (default 3000)")
    aws_options(dataset_load, "bucket")
    dataset_load.set_defaults(func=cmd_dataset_load)
