"""quafka's PySpark data source ``format("quafka")`` (pyspark 4.3 Python Data Source API): a batch
reader by offset, a share-group streaming source, and a sink. Imports only ``quafka.client`` (and
confluent-kafka to produce), so it works against quafka and against Apache Kafka 4.2+.
Install with the ``[spark]`` extra."""

from .datasource import QuafkaDataSource

__all__ = ["QuafkaDataSource"]
