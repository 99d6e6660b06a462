"""A seeded whole-broker simulator (TigerBeetle's VOPR and FoundationDB's simulation are the
models): the real BrokerServer on simulated durable storage, a virtual clock, simulated clients,
faults at every storage effect, invariants checked after every step. See docs/testing.md
("Simulator") and `python -m tests.sim --help`."""
