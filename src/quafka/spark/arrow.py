"""The records' schema (Spark's Kafka source columns plus deliveryCount) and the Arrow record
batches the readers yield: shared by the batch reader (`batch.py`), the share-group stream
(`stream.py`) and the DataSource (`datasource.py`), which import it; it imports none of them."""

from __future__ import annotations

from datetime import datetime, timezone

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["RECORD_SCHEMA", "arrow_schema", "columns_batch", "utc_datetime"]

#: Spark's Kafka source columns, plus deliveryCount (null when read by offset).
RECORD_SCHEMA = StructType([
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), False),
    StructField("timestampType", IntegerType(), False),
    StructField("headers", ArrayType(StructType([StructField("key", StringType(), False),
                                                 StructField("value", BinaryType(), True)])), True),
    StructField("deliveryCount", IntegerType(), True),
])


def utc_datetime(timestamp_ms: int) -> datetime:
    """A record timestamp (epoch milliseconds) as Spark's TimestampType value."""
    return datetime.fromtimestamp(timestamp_ms / 1000, timezone.utc)


_ARROW_SCHEMA = None


def arrow_schema():
    """RECORD_SCHEMA as the Arrow schema Spark checks a yielded ``pyarrow.RecordBatch`` against
    (``plan_data_source_read``: ``to_arrow_schema(schema, timezone="UTC")``, compared exactly)."""
    global _ARROW_SCHEMA
    if _ARROW_SCHEMA is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        _ARROW_SCHEMA = to_arrow_schema(RECORD_SCHEMA, timezone="UTC")
    return _ARROW_SCHEMA


def columns_batch(topic: str, partition: int, cols: dict[str, list]):
    """``AcquiredBatches.columns()`` of one partition as a ``pyarrow.RecordBatch`` of RECORD_SCHEMA."""
    import pyarrow as pa

    schema = arrow_schema()
    n = len(cols["offset"])
    headers = cols["headers"]
    columns = [
        pa.array(cols["key"], pa.binary()),
        pa.array(cols["value"], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(cols["offset"], pa.int64()),
        pa.array([t * 1000 for t in cols["timestamp"]], schema.field("timestamp").type),
        pa.array(cols["timestamp_type"], pa.int32()),
        pa.array(headers, schema.field("headers").type) if any(headers) else
        pa.array([[]] * n, schema.field("headers").type),
        pa.array(cols["delivery_count"], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
