"""Kafka wire format: framing, kio-based decoding, hot-path encoders, record batches, error codes.

Pure and synchronous; imports nothing else from quafka.
"""
