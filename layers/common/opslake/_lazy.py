"""Lazy package exports: a package's ``__init__`` names its public API without importing it.

Packages mix light and heavy modules (``lake.layout`` is pure, ``lake.writer`` needs pyarrow;
``tools.app`` is on every request path, ``tools.sql`` needs sqlglot). A name taken from the
package imports only the module that defines it, so naming the API costs no cold start.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
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
