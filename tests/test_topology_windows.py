"""Windows processor groups (KEP-4885): flat ids <-> (group, mask), both ways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_topology.topology import windows
from nri_topology.topology.windows import GroupAffinity, GroupError
from tests.machines import load

cpu_sets = st.frozensets(st.integers(min_value=0, max_value=64 * 20 - 1), max_size=200)


@pytest.mark.parametrize(
    ("cpu", "group", "bit"), [(0, 0, 0), (63, 0, 63), (64, 1, 0), (100, 1, 36), (1279, 19, 63)]
)
def test_split_join(cpu: int, group: int, bit: int) -> None:
    assert windows.split(cpu) == (group, bit)
    assert windows.join(group, bit) == cpu


@pytest.mark.parametrize(("group", "bit"), [(-1, 0), (0, 64), (0, -1)])
def test_join_rejects(group: int, bit: int) -> None:
    with pytest.raises(GroupError):
        windows.join(group, bit)


def test_split_rejects_negative() -> None:
    with pytest.raises(GroupError):
        windows.split(-1)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        (set(), ""),
        ({0, 1, 2, 3}, "0:0x000000000000000f"),
        ({63, 64}, "0:0x8000000000000000,1:0x0000000000000001"),
        # two groups of 36 processors: flat ids 0-35 and 64-99
        (set(range(36)) | set(range(64, 100)), "0:0x0000000fffffffff,1:0x0000000fffffffff"),
        ({130}, "2:0x0000000000000004"),
    ],
)
def test_to_groups_and_text(cpus: set[int], text: str) -> None:
    groups = windows.to_groups(cpus)
    assert windows.format_groups(groups) == text
    assert windows.parse_groups(text) == groups
    assert windows.from_groups(groups) == cpus


@pytest.mark.parametrize(
    "text", ["0", "0:", "x:0x1", "0:0xg", "-1:0x1", "0:0x10000000000000000", "0:0x1,,1:0x1"]
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(GroupError):
        windows.parse_groups(text)


def test_parse_accepts_decimal_masks_and_spaces() -> None:
    assert windows.parse_groups(" 1 : 3 ") == (GroupAffinity(1, 3),)


def test_group_affinity_validates() -> None:
    with pytest.raises(GroupError):
        GroupAffinity(0, 1 << 64)
    with pytest.raises(GroupError):
        GroupAffinity(-2, 1)


@given(cpu_sets)
def test_round_trip_flat(cpus: frozenset[int]) -> None:
    groups = windows.to_groups(cpus)
    assert windows.from_groups(groups) == cpus
    assert windows.parse_groups(windows.format_groups(groups)) == groups
    assert all(g.mask for g in groups)
    assert [g.group for g in groups] == sorted({c // 64 for c in cpus})


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, (1 << 64) - 1)), max_size=20))
def test_round_trip_groups(pairs: list[tuple[int, int]]) -> None:
    merged: dict[int, int] = {}
    for g, m in pairs:
        merged[g] = merged.get(g, 0) | m
    groups = tuple(GroupAffinity(g, merged[g]) for g in sorted(merged))
    assert windows.to_groups(windows.from_groups(groups)) == groups


@given(st.integers(0, 1 << 20))
def test_round_trip_single(cpu: int) -> None:
    assert windows.join(*windows.split(cpu)) == cpu


def test_machine_and_node_groups() -> None:
    m = load("4-socket")  # 144 CPUs: groups 0, 1 full, group 2 with 16
    groups = windows.machine_groups(m)
    assert [(g.group, bin(g.mask).count("1")) for g in groups] == [(0, 64), (1, 64), (2, 16)]
    per_node = windows.node_groups(m)
    assert windows.from_groups(per_node[0]) == m.nodes[0].cpus
    assert [g.group for g in per_node[0]] == [0, 1]  # CPUs 0-17 and 72-89


def test_render_both_forms() -> None:
    assert windows.render({0, 1, 64}, groups=False) == "0-1,64"
    assert windows.render({0, 1, 64}, groups=True) == "0:0x0000000000000003,1:0x0000000000000001"
