"""A function's handler module must not share its name with a module it could shadow.

Lambda puts the function's code directory first on ``sys.path`` (``/var/task``), and the local
stack's in-process invoker does the same, so a handler file named like a standard-library module or
an installed package replaces it for every import in that process: ``functions/gateway/mcp.py``
made ``import mcp`` load the handler instead of the MCP SDK once the local stack had served one
``POST /mcp``; ``functions/observer/profile.py`` shadowed the standard library's profiler.
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.infrastructure


def installed_top_level_names() -> set[str]:
    names: set[str] = set()
    for dist in importlib.metadata.distributions():
        top = dist.read_text("top_level.txt")
        if top:
            names.update(line.strip() for line in top.splitlines() if line.strip())
        for file in dist.files or ():
            first = file.parts[0]
            if first.endswith(".py"):
                names.add(first[:-3])
            elif "." not in first and not first.endswith(("-info", "__pycache__")):
                names.add(first)
    return names


def test_no_handler_module_shadows_the_standard_library_or_an_installed_package(
    resources: dict[str, Any],
) -> None:
    taken = set(sys.stdlib_module_names) | installed_top_level_names()
    assert "mcp" in taken and "profile" in taken  # the check sees what it must
    handlers = {
        logical_id: resource["Properties"]["Handler"].rsplit(".", 1)[0]
        for logical_id, resource in resources.items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    assert len(handlers) >= 17
    assert {fn: module for fn, module in handlers.items() if module in taken} == {}
