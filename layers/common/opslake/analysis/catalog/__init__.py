"""The tool catalog: what opslake learns about every tool it sees in the traffic (arguments, value
shapes, error templates, the tools called before it), kept between consolidator runs and served to
the learning logic as its vocabulary.

* :mod:`.shapes` — a value's shape, in Python and in SQL (``certificate_7815826`` → ``certificate_9999999``);
* :mod:`.arguments` — a call's arguments read from its recorded input;
* :mod:`.catalog_sql` — the window's tallies, computed by the engine;
* :mod:`.fold` — tallies, signatures and declared schemas folded into the catalog;
* :mod:`.declared` — schemas a team registers (MCP ``tools/list``, OpenAI functions, JSON Schema);
* :mod:`.known` — the :class:`~.known.Vocabulary` the contrasts, the fence and the gate read.

Names resolve lazily (the SQL module imports the playbook logic, which imports the vocabulary).
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "arguments": ("argument_shapes", "call_arguments"),
        "catalog_sql": ("catalog_window_sql", "signatures_sql"),
        "declared": ("declared_tools", "DeclaredSchemaError"),
        "fold": ("fold",),
        "known": ("Vocabulary", "vocabulary_of"),
        "shapes": ("pattern", "spoken", "value_shape", "value_shape_sql"),
    },
)
