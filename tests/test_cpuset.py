"""The Linux list format, both ways."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_topology.topology import cpuset


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("", set()),
        ("0", {0}),
        ("0-3", {0, 1, 2, 3}),
        ("0-1,4,8-9", {0, 1, 4, 8, 9}),
        (" 2 , 5-6\n", {2, 5, 6}),
    ],
)
def test_parse(text: str, ids: set[int]) -> None:
    assert cpuset.parse(text) == ids


@pytest.mark.parametrize("text", ["a", "1-", "3-1", "1,,2", "-1", "1-2-3"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(cpuset.CpuSetError):
        cpuset.parse(text)


@given(st.sets(st.integers(min_value=0, max_value=4096)))
def test_round_trip(ids: set[int]) -> None:
    assert cpuset.parse(cpuset.format(ids)) == ids


@given(st.frozensets(st.integers(min_value=0, max_value=4096)))
def test_the_remembered_text_is_the_formatted_one(ids: frozenset[int]) -> None:
    assert cpuset.text(ids) == cpuset.format(ids) == cpuset.text(frozenset(ids))


def test_a_bound_refuses_large_ids_before_building_a_set() -> None:
    assert cpuset.parse("0-3,7", below=8) == {0, 1, 2, 3, 7}
    with pytest.raises(cpuset.CpuSetError, match="beyond the largest id 7"):
        cpuset.parse("0-999999999999", below=8)
