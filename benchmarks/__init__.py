"""Benchmark scripts; `python -m benchmarks` runs them side by side with dlt (see benchmarks/__main__.py)."""
