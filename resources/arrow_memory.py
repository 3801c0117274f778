"""Arrow's allocator in the processes that page the API into Parquet.

pyarrow's default pool (mimalloc in its current wheels) keeps much of what a sync frees. The nightly sync
at 100k KOLs peaked at 475-479 MB with it, 444-447 MB with jemalloc and 435-441 MB with the system
allocator (3 runs each of benchmarks/nightly_sync.py, 24 Nov 2026). jemalloc, Arrow's long-standing choice on
Linux, is used where pyarrow has it, else the system allocator. pyarrow's own variable
ARROW_DEFAULT_MEMORY_POOL, when set, wins."""

from __future__ import annotations

import os

import pyarrow as pa

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"


def use_lean_memory_pool() -> str:
    """Make jemalloc (else the system allocator) Arrow's default pool, unless POOL_ENV chose one; returns
    the pool's name."""
    if os.environ.get(POOL_ENV):
        return pa.default_memory_pool().backend_name
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc (Windows, some macOS wheels)
        pool = pa.system_memory_pool()
    pa.set_memory_pool(pool)
    return pool.backend_name
