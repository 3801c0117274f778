"""The processes that page the API into Parquet allocate Arrow memory with jemalloc (pyarrow's default,
mimalloc, kept ~30 MB more at the peak of a 100k-KOL sync), unless pyarrow's own variable chose a pool."""

import dagster as dg
import pyarrow as pa
import pytest

from resources.api import CommopsApiResource
from resources.arrow_memory import POOL_ENV


@pytest.fixture
def default_pool_restored():
    before = pa.default_memory_pool()
    yield before
    pa.set_memory_pool(before)


def test_a_run_with_the_api_resource_allocates_arrow_memory_with_jemalloc(monkeypatch, default_pool_restored):
    monkeypatch.delenv(POOL_ENV, raising=False)
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    with dg.build_resources({"api": CommopsApiResource()}):
        assert pa.default_memory_pool().backend_name in {"jemalloc", "system"}  # system where pyarrow lacks jemalloc


def test_pyarrows_own_variable_keeps_the_pool_it_chose(monkeypatch, default_pool_restored):
    monkeypatch.setenv(POOL_ENV, "mimalloc")
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    with dg.build_resources({"api": CommopsApiResource()}):
        assert pa.default_memory_pool().backend_name == "mimalloc"
