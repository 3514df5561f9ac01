"""Sample datasets the gateway tools expose (pure generators; Arrow schemas in ``.schema``)."""

from opslake.datasets.staffing import (
    DEFAULT_SEED,
    DEFAULT_WORKERS,
    DESCRIPTIONS,
    PLACEMENTS,
    TABLES,
    WORKERS,
    generate,
    generate_placements,
    generate_workers,
)

__all__ = [
    "DEFAULT_SEED",
    "DEFAULT_WORKERS",
    "DESCRIPTIONS",
    "PLACEMENTS",
    "TABLES",
    "WORKERS",
    "generate",
    "generate_placements",
    "generate_workers",
]
