"""A compact, exact set of string ids: what a listing has seen of a list of a million rows.

A Python set of a million 20-character ids holds about 114 MB (a str object and a hash-table slot each).
An `IdSet` keeps each id's UTF-8 bytes once, end to end in one bytearray (with each one's end), and a
sorted array of their 64-bit hashes with each one's position for membership: about 40 bytes an id, 64 MB
resident for a million. (Not Arrow arrays: the Arrow memory pool keeps what a fold frees, and held twice
the ids' size.) Ids added since the last fold sit in a small dict until it folds them in. A hash found in
the array is confirmed against the stored id, so two ids that share a hash are still told apart.
Membership is asked a batch at a time."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from itertools import accumulate

import numpy as np

FOLD_AT = 65_536  # ids kept in the dict before they fold into the arrays (a few MB)


class IdSet:
    _hash = staticmethod(hash)  # stable within the process, which is all an IdSet lives in

    def __init__(self, ids: Iterable[str] = (), *, fold_at: int = FOLD_AT) -> None:
        self._fold_at = fold_at
        self._data = bytearray()  # folded ids, UTF-8, end to end, in the order they were added
        self._ends = array("q")  # where each folded id ends in _data
        self._hashes = np.empty(0, dtype=np.int64)  # folded ids' hashes, sorted
        self._positions = np.empty(0, dtype=np.uint32)  # the position of the id of each hash
        self._recent: dict[str, None] = {}  # added since the last fold, in order
        self.add_new(list(ids))

    def __len__(self) -> int:
        return len(self._positions) + len(self._recent)

    def __contains__(self, item_id: object) -> bool:
        return isinstance(item_id, str) and self.has([item_id])[0]

    def __iter__(self) -> Iterator[str]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[str]]:
        """The ids, a list at a time, in the order they were added."""
        for start in range(0, len(self._ends), self._fold_at):
            yield [self._id_at(position) for position in range(start, min(start + self._fold_at, len(self._ends)))]
        if self._recent:
            yield list(self._recent)

    def has(self, ids: list[str]) -> list[bool]:
        """For each id, whether it is in the set."""
        recent = self._recent
        return [folded or item_id in recent for item_id, folded in zip(ids, self._folded_has(ids))]

    def add_new(self, ids: list[str]) -> list[bool]:
        """Add the ids; for each, whether it was new (an id twice in `ids` is new the first time only)."""
        recent, fresh = self._recent, []
        for item_id, seen in zip(ids, self._folded_has(ids)):
            new = not seen and item_id not in recent
            fresh.append(new)
            if new:
                recent[item_id] = None
        if len(recent) >= self._fold_at:
            self._fold()
        return fresh

    def _folded_has(self, ids: list[str]) -> list[bool]:
        if not len(self._positions) or not ids:
            return [False] * len(ids)
        hashes = np.fromiter(map(self._hash, ids), dtype=np.int64, count=len(ids))
        at = np.minimum(np.searchsorted(self._hashes, hashes), len(self._hashes) - 1)
        hits = self._hashes[at] == hashes
        if not hits.any():
            return hits.tolist()
        found, where = hits.tolist(), np.flatnonzero(hits).tolist()
        for index, position in zip(where, self._positions[at[where]].tolist()):
            if self._id_at(position) != ids[index]:  # nearly always it is the id itself; else another of its hash
                found[index] = self._under_hash(ids[index], int(at[index]), int(hashes[index]))
        return found

    def _under_hash(self, item_id: str, at: int, hashed: int) -> bool:
        """Whether `item_id` is among the ids stored under its hash from `at` on (another id shares it)."""
        while at < len(self._hashes) and self._hashes[at] == hashed:
            if self._id_at(int(self._positions[at])) == item_id:
                return True
            at += 1
        return False

    def _id_at(self, position: int) -> str:
        start = self._ends[position - 1] if position else 0
        return self._data[start:self._ends[position]].decode()

    def _fold(self) -> None:
        ids = list(self._recent)
        hashes = np.fromiter(map(self._hash, ids), dtype=np.int64, count=len(ids))
        order = np.argsort(hashes, kind="stable")
        folded = len(self._positions)
        positions = np.arange(folded, folded + len(ids), dtype=np.uint32)[order]
        hashes = hashes[order]
        at = np.searchsorted(self._hashes, hashes)
        self._hashes = np.insert(self._hashes, at, hashes)
        self._positions = np.insert(self._positions, at, positions)
        encoded = [item_id.encode() for item_id in ids]
        self._ends.extend(accumulate(map(len, encoded), initial=len(self._data)))
        del self._ends[folded]  # accumulate's initial value: where this fold starts
        self._data += b"".join(encoded)
        self._recent = {}


Ids = IdSet | set[str] | frozenset[str] | list[str]


def _has(ids: Ids, batch: list[str]) -> list[bool]:
    return ids.has(batch) if isinstance(ids, IdSet) else [item_id in ids for item_id in batch]


def _batches(ids: Ids) -> Iterable[list[str]]:
    return ids.batches() if isinstance(ids, IdSet) else [list(ids)]


def outside(ids: Ids, *others: Ids) -> Iterator[str]:
    """The ids of `ids` in none of `others`."""
    for batch in _batches(ids):
        elsewhere = [_has(other, batch) for other in others]
        yield from (item_id for item_id, *found in zip(batch, *elsewhere) if not any(found))


def count_outside(ids: Ids, *others: Ids) -> int:
    """How many of `ids` are in none of `others`, walking whichever side is smaller."""
    if len(ids) <= sum(len(other) for other in others):
        return sum(1 for _ in outside(ids, *others))
    inside = 0
    for index, other in enumerate(others):
        for batch in _batches(other):  # ids of `other` in `ids`, and not counted with an earlier other
            inside += sum(1 for _ in outside([i for i, found in zip(batch, _has(ids, batch)) if found], *others[:index]))
    return len(ids) - inside


def common(a: Ids, b: Ids) -> set[str]:
    """The ids in both, walking the smaller."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    return {item_id for batch in _batches(small) for item_id, found in zip(batch, _has(large, batch)) if found}
