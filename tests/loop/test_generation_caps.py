"""Rows' own response-length caps (``max_response_tokens``), as the generator passes them to the engines."""

from __future__ import annotations

import pytest

from reasonrl.loop.generation import row_max_tokens


def test_rows_without_a_cap_leave_the_engine_call_unchanged():
    assert row_max_tokens([{"id": 1}, {"id": 2}], 64) is None


def test_each_row_gets_its_cap_at_most_the_run_limit_and_the_others_the_run_limit():
    assert row_max_tokens([{"max_response_tokens": 10}, {}, {"max_response_tokens": 500}], 64) == [10, 64, 64]


@pytest.mark.parametrize("bad", [0, -3, 2.5, "12", True])
def test_a_cap_that_is_not_a_positive_int_names_the_row(bad):
    with pytest.raises(ValueError, match=r"row 'r7': max_response_tokens=.* must be an int >= 1"):
        row_max_tokens([{"id": "r7", "max_response_tokens": bad}], 64)
