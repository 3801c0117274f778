"""benchmarks/in_flight.py: the share of a fetch with no request in flight, and its pauses."""

from benchmarks.in_flight import idle_share, pauses


def test_idle_time_is_what_no_request_covers_however_requests_overlap():
    # 0-1 and 0.5-2 overlap, 0.6-0.9 lies inside both; then 2.1-3 and 3.5-4: idle 0.1 s and 0.5 s of 4 s.
    spans = [(0.5, 2.0), (0.0, 1.0), (0.6, 0.9), (3.5, 4.0), (2.1, 3.0)]
    assert abs(idle_share(spans) - 0.6 / 4) < 1e-9
    assert pauses(spans, longer_than=0.2) == [0.5]
    assert [round(p, 9) for p in pauses(spans, longer_than=0.05)] == [0.1, 0.5]


def test_requests_always_in_flight_leave_no_idle_time():
    assert idle_share([(0.0, 1.0), (1.0, 2.0), (0.5, 1.5)]) == 0.0
    assert pauses([(0.0, 1.0), (1.0, 2.0)]) == []
    assert idle_share([]) == 0.0 and idle_share([(1.0, 1.0)]) == 0.0
