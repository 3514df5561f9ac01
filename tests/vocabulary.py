"""The staffing world's vocabulary for tests: what the learning jobs would know at run time after
agents used the gateway (the tool catalog) and read from Glue (the tables), built here from the
same sources the real run reads — template.yaml's routes, the gateway tools' request models (as
``tools/list`` declares them), the sample dataset's tables and values — so that unit tests of the
fence, the gate and the contrasts judge text the way a run over staffing traffic does.

The learning code never imports the sample dataset; tests may (it is one world among many).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from opslake.analysis.catalog.known import Vocabulary, vocabulary_of
from opslake.analysis.fence import KnownNames
from opslake.datasets.staffing import _CLIENTS, CITIES, ROLES
from opslake.models.catalog import ArgumentStat, ShapeStat, ToolCatalog, ToolStat

ROOT = Path(__file__).resolve().parents[1]
#: Two keys vouch for every item: known under the default trust and reporter threshold.
WITNESSES = ["staffing-key-a", "staffing-key-b"]
#: Word values the sample's agents send (cities, states, roles, clients): instances, many of each.
INSTANCE_VALUES = {
    "role": [r.name for r in ROLES],
    "city": sorted({c for c, _ in CITIES}),
    "state": sorted({s for _, s in CITIES}),
    "client": sorted(_CLIENTS),
}


def gateway_routes() -> list[str]:
    from opslake_local.template import Template

    return sorted({r.path for r in Template(ROOT / "template.yaml").api_routes()})


def _argument(name: str, schema: dict[str, object]) -> ArgumentStat:
    values = INSTANCE_VALUES.get(name, [])
    return ArgumentStat(
        name=name, calls=100, witnesses=WITNESSES, declared=True,
        shapes=[ShapeStat(shape=v, calls=2, witnesses=WITNESSES) for v in values[:64]],
        distinct_shapes=len(values),
        type=schema.get("type") if isinstance(schema.get("type"), str) else None,  # type: ignore[arg-type]
    )  # fmt: skip


@cache
def staffing_catalog() -> ToolCatalog:
    """The gateway's tools as ``tools/list`` declares them (route, arguments), each called by two keys."""
    from opslake.tools.mcp.registry import TOOLS

    tools = []
    for spec in TOOLS:
        properties = dict(spec.input_schema().get("properties") or {})
        properties.update({p: {"type": "string"} for p in spec.path_parameters})
        tools.append(
            ToolStat(
                endpoint=spec.route, calls=100, witnesses=WITNESSES, declared=True,
                arguments=[_argument(name, schema) for name, schema in properties.items()],
            )
        )  # fmt: skip
    return ToolCatalog(tools=tools)


@cache
def staffing_tables() -> dict[str, list[str]]:
    from opslake.datasets.schema import PLACEMENTS_SCHEMA, WORKERS_SCHEMA

    return {"workers": list(WORKERS_SCHEMA.names), "placements": list(PLACEMENTS_SCHEMA.names)}


@cache
def staffing_vocabulary() -> Vocabulary:
    """The catalog and tables a run over the staffing demo's traffic would read."""
    return vocabulary_of(staffing_catalog(), staffing_tables(), routes=gateway_routes())


def known() -> KnownNames:
    """The staffing vocabulary's names (what the fence validates)."""
    return staffing_vocabulary().known_names


def with_tools(tools: dict[str, list[str]], base: Vocabulary | None = None) -> Vocabulary:
    """``base`` (default: the staffing vocabulary) plus tools the catalog learned, each with the
    arguments given, each called by two keys (known)."""
    base = base or staffing_vocabulary()
    extra = [
        ToolStat(
            endpoint=endpoint, calls=10, witnesses=WITNESSES,
            arguments=[ArgumentStat(name=a, calls=10, witnesses=WITNESSES) for a in arguments],
        )
        for endpoint, arguments in tools.items()
    ]  # fmt: skip
    kept = [t for t in base.catalog.tools if t.endpoint not in tools]
    return vocabulary_of(ToolCatalog(tools=[*kept, *extra]), base.tables, routes=base.routes)
