"""The listing's record of the ids it has seen (resources/commops_api/_idset.py) answers exactly as a
Python set would, also when ids share a hash and after they fold into its compact arrays."""

import random

import pytest

from resources.commops_api._idset import IdSet, common, count_outside, outside


class CollidingIdSet(IdSet):
    _hash = staticmethod(lambda item_id: len(item_id) % 3)  # nearly every id shares its hash with others


@pytest.mark.parametrize("kind", [IdSet, CollidingIdSet])
def test_pages_of_ids_with_repeats_are_judged_new_exactly_as_a_set_judges_them(kind):
    rng = random.Random(7)
    universe = [f"kol_{rng.getrandbits(40):x}" for _ in range(600)]
    ids, reference = kind(fold_at=16), set()
    for _ in range(120):
        page = [rng.choice(universe) for _ in range(rng.randint(0, 12))]
        expected = []
        for item_id in page:
            expected.append(item_id not in reference)
            reference.add(item_id)
        assert ids.add_new(page) == expected
    assert len(ids) == len(reference)
    assert set(ids) == reference
    assert all(item_id in ids for item_id in reference)
    assert not any(item_id in ids for item_id in set(universe) - reference)
    assert "kol_" not in ids and None not in ids


@pytest.mark.parametrize("kind", [IdSet, CollidingIdSet])
def test_counts_and_overlaps_between_lists_equal_set_arithmetic(kind):
    rng = random.Random(11)
    active = {f"kol_{i}" for i in rng.sample(range(5_000), 3_000)}
    archived = {f"kol_{i}" for i in rng.sample(range(5_000), 400)}
    gone = {f"kol_{i}" for i in rng.sample(range(5_000), 50)}
    big, small = kind(sorted(active), fold_at=256), kind(sorted(archived), fold_at=256)
    assert count_outside(big, small, gone) == len(active - archived - gone)
    assert count_outside(small, big, gone) == len(archived - active - gone)
    assert count_outside(small, gone) == len(archived - gone)
    assert count_outside(big) == len(active)
    assert common(big, small) == active & archived == common(small, big)
    assert set(outside(big, small, gone)) == active - archived - gone


def test_two_hundred_thousand_ids_take_under_half_the_memory_of_a_python_set():
    import tracemalloc

    def held(build) -> int:
        tracemalloc.start()
        try:
            kept = build()
            size = tracemalloc.get_traced_memory()[0]
            assert len(kept) == 200_000
            return size
        finally:
            tracemalloc.stop()

    pages = lambda: ([f"kol_{(i * 7919):016x}" for i in range(j, j + 100)] for j in range(0, 200_000, 100))  # noqa: E731
    as_set = held(lambda: {item_id for page in pages() for item_id in page})

    def as_idset():
        ids = IdSet()
        for page in pages():
            ids.add_new(page)
        return ids

    assert held(as_idset) < as_set / 2

