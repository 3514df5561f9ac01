"""Lazy package exports: a package's ``__init__`` names its public API without importing it.

Packages mix light and heavy modules (``lake.layout`` is pure, ``lake.writer`` needs pyarrow;
``tools.app`` is on every request path, ``tools.sql`` needs sqlglot). A name taken from the
package imports only the module that defines it, so naming the API costs no cold start.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


def lazy_exports(package: str, api: Mapping[str, Sequence[str]]) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` for ``package`` whose public names are ``api[submodule]``."""
    home = {name: module for module, names in api.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return sorted(home), __getattr__


def import_file(name: str, path: Path) -> ModuleType:
    """The Python file ``path`` imported as module ``name`` (registered in ``sys.modules`` while it
    runs, so its own imports and dataclasses resolve; removed again if it fails): how a Lambda
    handler file is loaded by path, by the local stack and by ``POST /mcp`` for its tools' handlers."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
