"""Control batches: the COMMIT / ABORT end-transaction markers a transaction coordinator writes.

A transaction ends in every partition it touched with one *control batch* holding one *control
record* (Kafka's `MemoryRecords.withEndTransactionMarker`, `EndTransactionMarker`,
`ControlRecordType`):

- batch attributes: transactional (0x10) and control (0x20) bits, no compression, CreateTime;
- batch header: the transaction's producer id and producer epoch, base sequence -1 (markers are
  not sequenced), one record, base and max timestamp the time the marker is written;
- record key (4 bytes): int16 version 0, int16 type (0 ABORT, 1 COMMIT: `ControlRecordType`);
- record value (6 bytes): int16 version 0, int32 coordinator epoch (`EndTransactionMarker`).

Kafka reads a key or value of a higher version by its version-0 prefix (`ControlRecordType.parse`,
`EndTransactionMarker.deserializeValue`); `decode_end_txn_marker` does the same. Control types
other than COMMIT and ABORT exist (KRaft's LEADER_CHANGE, SNAPSHOT_HEADER, ...) but never appear
in a partition's data log; they decode as `ControlType.UNKNOWN`.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from .record_batch import (
    CONTROL_FLAG, LOG_OVERHEAD, NO_SEQUENCE, TRANSACTIONAL_FLAG, build_batch, iter_records, read_header,
)

CONTROL_ATTRIBUTES = TRANSACTIONAL_FLAG | CONTROL_FLAG
CONTROL_KEY_VERSION = 0  # ControlRecordType.CURRENT_CONTROL_RECORD_KEY_VERSION
END_TXN_MARKER_VERSION = 0  # EndTransactionMarker.CURRENT_END_TXN_MARKER_VERSION
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    """Kafka's ControlRecordType ids that a data log holds (UNKNOWN: any other id)."""

    ABORT = 0
    COMMIT = 1
    UNKNOWN = -1


class EndTxnMarker(NamedTuple):
    """One decoded marker: the batch's producer id and epoch, the record's type and epoch."""

    producer_id: int
    producer_epoch: int
    control_type: ControlType
    coordinator_epoch: int
    offset: int  # the marker's offset (the batch's base offset)

    @property
    def committed(self) -> bool:
        return self.control_type == ControlType.COMMIT


class InvalidControlBatch(ValueError):
    """A control batch whose record is not a readable end-transaction marker."""


def end_txn_marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                         timestamp_ms: int, *, base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """The bytes of a COMMIT (committed) or ABORT marker batch with a valid CRC, as
    `MemoryRecords.withEndTransactionMarker` builds it. The log stamps the real base offset."""
    key = _KEY.pack(CONTROL_KEY_VERSION, ControlType.COMMIT if committed else ControlType.ABORT)
    value = _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return build_batch([(key, value)], base_offset=base_offset, base_timestamp=timestamp_ms, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE, attributes=CONTROL_ATTRIBUTES,
                       partition_leader_epoch=partition_leader_epoch)


def control_type_of_key(key: bytes | None) -> ControlType:
    """ControlRecordType.parse: the type in a control record's key (version-0 prefix)."""
    if key is None or len(key) < _KEY.size:
        raise InvalidControlBatch(f"control record key of {0 if key is None else len(key)} bytes: need {_KEY.size}")
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidControlBatch(f"control record key version {version} is negative")
    try:
        return ControlType(type_id)
    except ValueError:
        return ControlType.UNKNOWN


def decode_end_txn_marker(batch: bytes | bytearray | memoryview) -> EndTxnMarker | None:
    """The marker in a control batch (the batch's first record), or None if the control record is
    of another type. Raises InvalidControlBatch for a batch that is not a control batch or whose
    key or value cannot be read (EndTransactionMarker.deserialize)."""
    header = read_header(batch, 0)
    if not header.is_control:
        raise InvalidControlBatch(f"batch at offset {header.base_offset} is not a control batch")
    try:
        record = next(iter_records(memoryview(batch)[: header.batch_length + LOG_OVERHEAD]))
    except (StopIteration, ValueError, IndexError) as exc:
        raise InvalidControlBatch(f"control batch at offset {header.base_offset} has no readable record: {exc}") \
            from exc
    control_type = control_type_of_key(record.key)
    if control_type == ControlType.UNKNOWN:
        return None
    value = record.value
    if value is None or len(value) < _VALUE.size:
        raise InvalidControlBatch(f"end transaction marker value of {0 if value is None else len(value)} bytes: "
                                  f"need {_VALUE.size}")
    version, coordinator_epoch = _VALUE.unpack_from(value, 0)
    if version < 0:
        raise InvalidControlBatch(f"end transaction marker version {version} is negative")
    return EndTxnMarker(header.producer_id, header.producer_epoch, control_type, coordinator_epoch,
                        header.base_offset)
