"""The Commercial Operations Service: the spec's HTTP API, runnable locally."""
