"""The share-session epoch of ShareFetch and ShareAcknowledge requests, one definition for the
broker, the client and the tests (kafka-reference §2.5).

Kafka's `ShareRequestMetadata`: INITIAL_EPOCH (0) opens a session, FINAL_EPOCH (-1) closes it, and
each request of an open session carries the next epoch, wrapping from Integer.MAX_VALUE to 1
(`ShareRequestMetadata.nextEpoch`). Kafka also maps a negative epoch to FINAL_EPOCH there; quafka
never advances a closed session, so `next_epoch` is only called with epochs >= 0.
"""

from __future__ import annotations

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (>= 0) of an open share session."""
    return 1 if epoch >= INT32_MAX else epoch + 1
