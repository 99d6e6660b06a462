"""quafka's PySpark data source ``format("quafka")`` (pyspark 4.3 Python Data Source API): a batch
reader by offset, a share-group streaming source, and a sink. Imports only ``quafka.client`` (and
confluent-kafka to produce), so it works against quafka and against Apache Kafka 4.2+.
Install with the ``[spark]`` extra.

Call :func:`use_driver_python` before creating the SparkSession so that, on a local master, Spark's
Python workers run the driver's interpreter (the one quafka is installed in) rather than ``python3``
from ``PATH``."""

from ..protocol.kio_import import import_kio_without_test_strategies

# before the client imports kio: Spark's Python workers import quafka through here (a pickled
# reader names quafka.spark.*); without hypothesis's test strategies their imports, and the heap
# every task's garbage collection walks (worker_process.py), are smaller
import_kio_without_test_strategies()

from .datasource import QuafkaDataSource  # noqa: E402
from .interpreter import use_driver_python  # noqa: E402

__all__ = ["QuafkaDataSource", "use_driver_python"]
