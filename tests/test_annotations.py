"""Effective-annotation lookup: scopes, the alias domain, container annotations, the key table."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_topology.policy.intake.annotations import (
    ANNOTATIONS,
    SPECS,
    Scope,
    ScopedAnnotation,
    lookup,
)

P = "resource-policy.nri.io"
A = "cri-resource-manager.intel.com"
K = "prefer-shared-cpus"


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ({}, None),
        ({f"{K}.{P}": "1"}, ScopedAnnotation(f"{K}.{P}", "1", Scope.UNSCOPED)),
        ({f"{K}.{P}": "1", f"{K}.{P}/pod": "2"}, ScopedAnnotation(f"{K}.{P}/pod", "2", Scope.POD)),
        (
            {f"{K}.{P}": "1", f"{K}.{P}/pod": "2", f"{K}.{P}/container.app": "3"},
            ScopedAnnotation(f"{K}.{P}/container.app", "3", Scope.CONTAINER),
        ),
        # another container's key does not apply
        ({f"{K}.{P}/container.other": "3"}, None),
        (
            {f"{K}.{P}/container.other": "3", f"{K}.{P}": "1"},
            ScopedAnnotation(f"{K}.{P}", "1", Scope.UNSCOPED),
        ),
        # alias domain
        (
            {f"{K}.{A}/container.app": "4"},
            ScopedAnnotation(f"{K}.{A}/container.app", "4", Scope.CONTAINER),
        ),
        # primary wins over alias at equal scope
        (
            {f"{K}.{A}/pod": "4", f"{K}.{P}/pod": "2"},
            ScopedAnnotation(f"{K}.{P}/pod", "2", Scope.POD),
        ),
        # narrower scope wins over domain
        ({f"{K}.{A}/pod": "4", f"{K}.{P}": "1"}, ScopedAnnotation(f"{K}.{A}/pod", "4", Scope.POD)),
        # other keys and near misses are ignored
        ({f"prefer-isolated-cpus.{P}": "1", f"{K}.resource-manager.nri.io": "1"}, None),
    ],
)
def test_lookup_precedence(pod, expected):
    assert lookup(K, "app", pod) == expected


def test_container_annotations_win_at_equal_scope_only():
    pod = {f"{K}.{P}/pod": "pod", f"{K}.{P}/container.app": "narrow"}
    ctr = {f"{K}.{P}/pod": "ctr"}
    assert lookup(K, "app", pod, ctr).value == "narrow"
    assert lookup(K, "app", {f"{K}.{P}/pod": "pod"}, ctr).value == "ctr"
    assert lookup(K, "app", {f"{K}.{P}": "pod"}, ctr).value == "ctr"


@pytest.mark.parametrize("name", ["affinity", "anti-affinity"])
def test_prefixed_keys(name):
    assert lookup(name, "app", {f"{P}/{name}": "x"}) == ScopedAnnotation(
        f"{P}/{name}", "x", Scope.UNSCOPED
    )
    assert lookup(name, "app", {f"{A}/{name}": "y"}).value == "y"
    assert lookup(name, "app", {f"{A}/{name}": "y", f"{P}/{name}": "x"}).value == "x"
    # the scoped suffix form is not how these keys are spelled
    assert lookup(name, "app", {f"{name}.{P}": "x"}) is None


def test_unknown_name_is_a_programming_error():
    with pytest.raises(KeyError):
        lookup("prefer-everything", "app", {})


def test_key_table():
    names = [spec.name for spec in ANNOTATIONS]
    assert names == [
        "prefer-isolated-cpus",
        "require-isolated-cpus",
        "prefer-shared-cpus",
        "prefer-reserved-cpus",
        "hide-hyperthreads",
        "memory-type",
        "cold-start",
        "cpu.preserve",
        "memory.preserve",
        "topologyhints",
        "strict.topologyhints",
        "affinity",
        "anti-affinity",
        "prefer-cpu-priority",
        "numa-policy",
    ]
    assert SPECS["memory-type"].key == f"memory-type.{P}"
    assert SPECS["affinity"].key == f"{P}/affinity"
    assert all(spec.values and spec.meaning for spec in ANNOTATIONS)


def test_every_key_is_documented():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "annotations.md").read_text()
    for spec in ANNOTATIONS:
        assert f"`{spec.key}`" in doc, spec.key
