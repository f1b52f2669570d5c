"""The bounded YAML and JSON readers of annotation values, and the byte-bounded result cache."""

from __future__ import annotations

import contextlib
import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.intake import bounded
from nri_topology.policy.intake.bounded import (
    MAX_DEPTH,
    Refused,
    TextCache,
    json_depth,
    load_json,
    load_yaml,
)
from nri_topology.testing import hostile


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a: [1, 2, {b: c}]", {"a": [1, 2, {"b": "c"}]}),
        ("duration: 60s", {"duration": "60s"}),
        ("", None),
        ("a:", {"a": None}),
        ("a: ~", {"a": None}),
        ("a: 0x1f", {"a": 31}),
        ("a: -12", {"a": -12}),
        ("a: 1.5", {"a": 1.5}),
        ("a: yes", {"a": True}),
        ("a: '12'", {"a": "12"}),
        ("a: 2001-13-45", {"a": "2001-13-45"}),  # not a date: text, never a ValueError
        ("<<: {a: 1}", {"<<": {"a": 1}}),  # no merge keys
        (
            "web:\n  - match: {operator: AlwaysTrue}\n",
            {"web": [{"match": {"operator": "AlwaysTrue"}}]},
        ),
    ],
)
def test_yaml_values(text, value):
    assert load_yaml(text) == value


@pytest.mark.parametrize(
    ("text", "limit", "fragment"),
    [
        ("a: &x 1\nb: *x", "aliases", "anchors"),
        ("- *x", "aliases", ""),
        ("a: !!str 1", "", "tags"),
        ("a: !!python/object:os.system x", "", "tags"),
        ("a: 1\na: 2", "", "duplicate key 'a'"),
        ("[a]: 1", "", "key must be a scalar"),
        ("--- a\n--- b", "", "more than one"),
        ("a: [1", "", "not valid YAML"),
        ("a: " + "9" * 5000, "number", "5000 characters"),
        ("a: 0x" + "f" * 40, "number", ""),
        ("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "depth", ""),
        (hostile.nested_brackets(30_000), "depth", ""),
        (hostile.alias_bomb(), "aliases", ""),
    ],
)
def test_yaml_refusals(text, limit, fragment):
    with pytest.raises(Refused, match=fragment or None) as refused:
        load_yaml(text)
    assert refused.value.limit == limit


_BACKENDS = {"libyaml": getattr(yaml, "CSafeLoader", None), "python": yaml.SafeLoader}


@pytest.mark.parametrize("backend", sorted(_BACKENDS))
@pytest.mark.parametrize(
    "text",
    [
        hostile.nested_brackets(30_000),
        "a:\n" + "".join("  " * i + "b:\n" for i in range(1, 2000)),
        "- " * 2000 + "x",
    ],
    ids=["flow", "block mapping", "block sequence"],
)
def test_deep_nesting_names_the_depth_limit_whichever_layer_refuses(backend, text, monkeypatch):
    # libyaml 0.2.6 and newer refuse deep nesting in their scanner, before our depth check sees
    # the events; the refusal must name the same limit as ours.
    if _BACKENDS[backend] is None:
        pytest.skip("this PyYAML is built without libyaml")
    monkeypatch.setattr(bounded, "_PARSER", _BACKENDS[backend])
    with pytest.raises(Refused) as refused:
        load_yaml(text)
    assert refused.value.limit == "depth"
    assert str(refused.value) == f"nested deeper than {MAX_DEPTH} levels"


def test_yaml_nesting_up_to_the_limit_is_read():
    depth = MAX_DEPTH - 1
    assert load_yaml("a: " + "[" * depth + "]" * depth) is not None


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        (hostile.deep_json(1000), "depth"),
        ('{"a": ' + "9" * 5000 + "}", "number"),
        ('{"a": 1e' + "9" * 40 + "}", "number"),
        ('{"a": NaN}', ""),
        ('{"a": Infinity}', ""),
        ("[", ""),
    ],
)
def test_json_refusals(text, limit):
    with pytest.raises(Refused) as refused:
        load_json(text)
    assert refused.value.limit == limit


def test_json_depth_ignores_brackets_in_strings():
    assert json_depth('{"a": "[[[[{{{{", "b": ["\\"]"]}') == 2
    assert load_json('{"a": "[[[[", "b": 1e5}') == {"a": "[[[[", "b": 100000.0}


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_JSONISH)
def test_yaml_reads_what_safe_load_reads_without_anchors(value):
    text = yaml.safe_dump(value)
    assert load_yaml(text) == yaml.safe_load(text)
    assert load_json(json.dumps(value)) == value


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("[]{}:,-&*!?'\"|>#%@` \n\t0123456789.eExa")), max_size=200
    )
)
def test_readers_raise_nothing_but_refused(text):
    for load in (load_yaml, load_json):
        with contextlib.suppress(Refused):
            load(text)


def test_cache_is_bounded_by_text_length_and_keeps_refusals():
    cache = TextCache(max_chars=100)
    calls: list[str] = []

    def compute(key: str) -> str:
        calls.append(key)
        if key.startswith("bad"):
            raise Refused(f"{key} refused", "depth")
        return key.upper()

    for i in range(10):
        key = f"k{i}" + "x" * 28  # 30 characters each: three fit
        assert cache.get(key, len(key), lambda k=key: compute(k)) == key.upper()
    assert len(cache) == 3 and cache.chars == 90
    key = "k9" + "x" * 28
    cache.get(key, len(key), lambda: compute(key))  # still cached
    assert calls.count(key) == 1
    for _ in range(3):
        with pytest.raises(Refused, match="bad1 refused") as refused:
            cache.get("bad1", 4, lambda: compute("bad1"))
        assert refused.value.limit == "depth"
        assert refused.value.__context__ is None
    assert calls.count("bad1") == 1
    cache.get("y" * 101, 101, lambda: compute("y" * 101))  # larger than the cache: not kept
    assert cache.chars <= 100
