"""Every analyst query in queries/ is deployed as exactly one Athena NamedQuery with the same SQL.

CloudFormation cannot read files, so template.yaml inlines each query; this keeps the copies equal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from opslake_local.queries import AnalystQuery, load_queries, named_query_yaml, normalize_sql

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def query_files(project_root: Path) -> dict[str, AnalystQuery]:
    return load_queries(project_root / "queries")


@pytest.fixture(scope="module")
def named_queries(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {lid: r["Properties"] for lid, r in resources.items() if r["Type"] == "AWS::Athena::NamedQuery"}


def test_there_are_analyst_queries(query_files: dict[str, AnalystQuery]) -> None:
    assert len(query_files) >= 7


def test_each_query_file_has_exactly_one_identical_named_query(
    query_files: dict[str, AnalystQuery], named_queries: dict[str, dict[str, Any]]
) -> None:
    for name, query in query_files.items():
        matching = [props for props in named_queries.values() if props.get("Name") == name]
        hint = f"\nadd or update this resource in template.yaml:\n{named_query_yaml(query)}"
        assert len(matching) == 1, f"{len(matching)} NamedQuery resources named {name}" + hint
        assert normalize_sql(matching[0]["QueryString"]) == normalize_sql(query.sql), (
            f"NamedQuery {name} differs from {query.path.name}" + hint
        )


def test_each_named_query_has_a_query_file(
    query_files: dict[str, AnalystQuery], named_queries: dict[str, dict[str, Any]]
) -> None:
    orphans = sorted(
        f"{lid} ({props.get('Name')})"
        for lid, props in named_queries.items()
        if props.get("Name") not in query_files
    )
    assert not orphans, f"NamedQuery resources without a queries/*.sql file: {orphans}"


def test_named_queries_target_the_lake_database_and_workgroup(
    named_queries: dict[str, dict[str, Any]],
) -> None:
    for lid, props in named_queries.items():
        assert props["Database"] == {"Ref": "GlueDatabase"}, lid
        assert props["WorkGroup"] == {"Ref": "AthenaWorkGroup"}, lid
        assert props.get("Description"), f"{lid} has no Description"


def test_every_query_reads_a_bounded_partition_window(query_files: dict[str, AnalystQuery]) -> None:
    for name, query in query_files.items():
        assert "dt >=" in normalize_sql(query.sql), f"{name} scans every partition (no dt predicate)"
