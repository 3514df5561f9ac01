"""The lake: where op records and derived tables live in S3, in which format, and how Glue knows.

``layout`` (pure: partitions and object names; safe on the request path), ``schema`` (the ops
Arrow schema and the one Arrow<->Glue type map), ``parquet``, ``opkey`` (what makes an op row one
op: reporter_id and op_id), ``writer`` (an SQS batch → one Parquet object per hour partition;
``fastpath`` decodes a batch with Arrow), ``catalog`` (Glue partitions), ``store`` (whole-object
puts), ``derived`` (failures, signatures, diagnoses, playbooks), ``conditional`` (JSON objects
changed only by conditional writes: every lease), ``compaction`` (closed hours merged and
swapped in) and ``views`` (Glue views as Athena writes them). Names resolve lazily: most modules
need pyarrow, which the request path never imports.
"""

from opslake._lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "layout": ("PARTITION_KEYS", "ops_object_key", "partition_prefix", "partition_values", "s3_uri"),
        "schema": ("OPS_SCHEMA", "arrow_type", "glue_columns", "glue_type"),
        "parquet": ("ROW_GROUP_ROWS", "ops_table", "to_parquet_bytes"),
        "opkey": ("OP_KEY", "first_of_each_key"),
        "writer": ("LakeWriter", "QueueMessage", "WriteReport"),
        "catalog": ("Catalog", "GlueCatalog"),
        "store": ("ObjectStore", "S3ObjectStore"),
        "derived": ("SCHEMAS", "parquet_bytes", "read_rows", "whole_table_key"),
        "views": ("ensure_view", "is_view", "presto_view_input", "view_definition", "view_sql"),
        "conditional": ("ConditionalJson", "StateError", "lease_is_held"),
        "compaction": ("CompactionOptions", "CompactionReport", "Compactor"),
    },
)
