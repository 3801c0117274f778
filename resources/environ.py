"""Variables set in this process's environment for the length of a block, then restored (unset where they were
unset): for a child process a library starts with the environment it finds (dagster-dbt's dbt)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager


@contextmanager
def variables_set(values: Mapping[str, str | None]) -> Iterator[None]:
    """`values` set for the block; a name given None is unset for it."""
    saved = {name: os.environ.get(name) for name in values}
    _apply(os.environ, values)
    try:
        yield
    finally:
        _apply(os.environ, saved)


def environment_with(values: Mapping[str, str | None]) -> dict[str, str]:
    """This process's environment with `values` applied as `variables_set` applies them: for a child process."""
    environment = dict(os.environ)
    _apply(environment, values)
    return environment


def _apply(environment: MutableMapping[str, str], values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
