"""``format("quafka")``: the DataSource that Spark instantiates (in its planner process) and asks
for a schema, a reader, a stream reader, a writer or a stream writer.

- ``spark.read``: the batch reader (``batch.py``): plain Fetch by offset through
  ``quafka.client.PartitionReader``, no group; ``subscribe=__share_group_state`` reads the share
  state topic decoded (``SHARE_STATE_SCHEMA``).
- ``spark.readStream``: the share-group streaming source (``stream.py``), option ``share.group``.
- ``df.write`` / ``df.writeStream``: the sink (``sink.py``), producing with confluent-kafka.

Options are checked when Spark asks for the reader or writer (at query start); see ``options.py``.
"""

from __future__ import annotations


from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .arrow import RECORD_SCHEMA
from .options import SHARE_STATE_TOPIC, Options

__all__ = ["QuafkaDataSource", "RECORD_SCHEMA"]


class QuafkaDataSource(DataSource):
    """The data source named "quafka"."""

    @classmethod
    def name(cls) -> str:
        return "quafka"

    def _options(self) -> Options:
        return Options(self.options)

    def schema(self) -> StructType:
        opts = self._options()
        if opts.get("subscribe", "").strip() == SHARE_STATE_TOPIC:
            from .batch import SHARE_STATE_SCHEMA

            return SHARE_STATE_SCHEMA
        return RECORD_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch import QuafkaBatchReader

        return QuafkaBatchReader(self._options(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import QuafkaShareStreamReader

        return QuafkaShareStreamReader(self._options(), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import QuafkaWriter

        return QuafkaWriter(self._options(), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import QuafkaStreamWriter

        return QuafkaStreamWriter(self._options(), schema)
