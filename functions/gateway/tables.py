"""GET /tables and GET /tables/{name}: the allowlisted tables with their columns (from Glue)."""

from __future__ import annotations

from functools import cache

from opslake import runtime
from opslake.config import get_settings
from opslake.ingest.observe import summarize
from opslake.tools.app import create_tool_app
from opslake.tools.datasets import TableCatalog

settings = get_settings()
app = create_tool_app()


@cache
def catalog() -> TableCatalog:
    return TableCatalog.from_settings(runtime.client("glue"), settings)


@app.get("/tables")
def list_tables() -> dict:
    tables = catalog().tables()
    summarize(app, f"{len(tables)} tables")
    return {"tables": [info.model_dump() for info in tables.values()]}


@app.get("/tables/<name>")
def get_table(name: str) -> dict:
    info = catalog().table((app.current_event.path_parameters or {}).get("name", name))
    summarize(app, f"table {info.name}: {len(info.columns)} columns", table=info.name)
    return info.model_dump()


handler = runtime.api_handler(app)
