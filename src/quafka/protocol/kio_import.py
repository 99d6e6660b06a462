"""Importing kio (the protocol schemas) without its test strategies.

Where hypothesis is installed (a development or test environment), kio imports it and registers a
test strategy for each of its protocol types (kio/static/_phantom.py: PhantomMeta subclasses call
``__hypothesis_hook__``): ~0.5 s of imports (hypothesis, then pytest through trio.testing) and a
heap of objects, for strategies only property tests use. Kio takes an ImportError as "not
installed"."""

from __future__ import annotations

import importlib
import sys

__all__ = ["import_kio_without_test_strategies"]


def import_kio_without_test_strategies() -> None:
    """Import kio as if hypothesis were not installed, in a process that has imported neither yet
    (the `quafka` command, Spark's Python workers); a no-op otherwise. The ``sys.modules`` entry
    that hides hypothesis is removed again afterwards, so hypothesis stays importable."""
    if "kio" in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import hypothesis` raises ImportError
    try:
        importlib.import_module("kio.serial")
    finally:
        del sys.modules["hypothesis"]
