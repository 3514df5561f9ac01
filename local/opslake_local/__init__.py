"""The Docker-free local stack and the ``opslake`` CLI (never deployed).

A moto server provisioned from template.yaml, the handlers invoked in-process, a local API
Gateway and a local SQS event source mapping.

The names below load on first use: ``opslake mcp`` (an agent's stdio server) and the other light
commands must not pay for moto, which ``LocalStack`` imports (~0.6 s).
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "drain": ("BackgroundDrainer", "Drainer", "DrainResult", "drain_once"),
        "http": ("LocalApi",),
        "invoke": ("FunctionError", "Invoker", "LambdaContext"),
        "playbook_export": (
            "ExportError",
            "agents_block",
            "update_agents_md",
            "upsert_block",
            "write_skill_folder",
        ),
        "stack": ("ApiKey", "LocalStack"),
        "template": ("Template", "TemplateError", "find_template"),
    },
)
