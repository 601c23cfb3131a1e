"""The bisection the sizing searches share (``planner/fewest.py``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from parastrat.planner.fewest import first_accepted, whole_nodes_between


@given(
    st.lists(st.integers(1, 10_000), min_size=0, max_size=60, unique=True), st.integers(0, 10_001)
)
def test_a_monotone_probe_gets_the_first_count_it_accepts(counts, threshold):
    counts.sort()
    probed = []

    def probe(n):
        probed.append(n)
        return n if n >= threshold else None

    expected = next((n for n in counts if n >= threshold), None)
    assert first_accepted(counts, probe) == expected
    assert len(probed) <= max(1, len(counts)).bit_length() + 1  # a bisection, not a scan


def test_a_non_monotone_probe_still_gets_an_accepted_count():
    counts = [8, 16, 24, 32, 40]
    accepted = {8, 32, 40}  # 16 and 24 fail (no strategy divides them), 8 passes
    got = first_accepted(counts, lambda n: n if n in accepted else None)
    assert got in accepted


@given(st.integers(0, 5000), st.integers(0, 5000), st.sampled_from([1, 4, 8, 72]))
def test_whole_nodes_strictly_between(low, high, node):
    got = whole_nodes_between(low, high, node)
    assert got == sorted(got)
    assert all(low < n < high and n % node == 0 for n in got)
    assert len(got) == len([n for n in range(low + 1, high) if n % node == 0])
