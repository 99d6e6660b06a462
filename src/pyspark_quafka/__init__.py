"""Auto-registration of quafka's PySpark data source: PySpark registers any importable top-level
``pyspark_*`` module's ``DefaultSource`` under its ``name()``, so ``spark.read.format("quafka")``
and ``spark.readStream.format("quafka")`` work without ``spark.dataSource.register``."""

from quafka.spark.datasource import QuafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
