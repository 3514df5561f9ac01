"""Every package of the layer names its public API, and every name it exports resolves."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import opslake

PACKAGES = sorted(
    name for _, name, is_package in pkgutil.walk_packages(opslake.__path__, "opslake.") if is_package
)


def test_the_layout_reads_as_the_data_flow() -> None:
    top = {name.split(".")[1] for name in PACKAGES}
    assert {"http", "ingest", "queue", "lake", "query", "tools", "jobs", "analysis", "llm"} <= top
    assert {"insights", "models", "observability"} <= top


@pytest.mark.parametrize("package", PACKAGES)
def test_package_names_its_api_and_every_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    assert exported, f"{package}/__init__.py names no public API (__all__)"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{package} exports names that do not resolve: {missing}"
