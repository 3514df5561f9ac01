"""The lake: partition layout (pure), Arrow schema, Parquet writing and the Glue catalog.

Import submodules directly: ``opslake.lake.layout`` is safe on the request path, the others
import pyarrow and belong to the writer, analyzer and consolidator only.
"""
