"""parastrat.checks: the one whole-number test every layer uses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parastrat import SpecError, UsageError
from parastrat.checks import divisors, is_count, is_int, require_count


@pytest.mark.parametrize("bad", [True, False, 1.0, "2", None, 0, -3])
def test_is_count_refuses_bools_floats_and_small_values(bad):
    assert not is_count(bad)


def test_minimum_and_int_test():
    assert is_count(0, minimum=0) and not is_count(-1, minimum=0)
    assert is_int(-5) and not is_int(True)


def test_require_count_names_the_value_and_raises_the_callers_error():
    assert require_count("steps", 3) == 3
    with pytest.raises(UsageError, match=r"steps must be a whole number >= 1, got 2\.5"):
        require_count("steps", 2.5)
    with pytest.raises(SpecError, match="frames"):
        require_count("frames", 0, error=SpecError)


@given(st.integers(min_value=1, max_value=10_000))
def test_divisors_are_exactly_the_divisors(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize(
    ("name", "example"), [("seq_len", 4096), ("global_batch_size", 256), ("micro_batch_size", 1)]
)
def test_a_bad_count_names_a_typical_value(name, example):
    """The example in the message is one a user would pass (seq_len=4096, not seq_len=1)."""
    from parastrat.spec.workload import whole

    with pytest.raises(UsageError, match=rf"got '8' \(e\.g\. {name}={example}\)"):
        whole(name, "8")
