"""The incremental checkpoint encoder writes exactly what a whole-body JSON encoding would."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.daemon import checkpoint
from nri_topology.daemon.checkpoint import Encoder, decode, encode


def reference(body: Any) -> bytes:
    """The checkpoint document built the plain way, independently of the encoder."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    document = {
        "format": checkpoint.FORMAT,
        "version": checkpoint.VERSION,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "body": body,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode() + b"\n"


# Few distinct keys and JSON-equal-looking scalars (0, 0.0, False, 1, True), so successive bodies
# often put values equal to Python but different in JSON at the same path.
keys = st.sampled_from(["a", "b", "c", "é", "0"])
scalars = st.sampled_from([0, 0.0, False, 1, 1.0, True, None, "", "x", -5, 2.5])
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=12,
)
bodies = st.dictionaries(keys, values, max_size=4)


@settings(max_examples=150, deadline=None)
@given(st.lists(bodies, min_size=1, max_size=6), st.integers(1, 4), st.integers(1, 5))
def test_every_body_of_a_sequence_encodes_as_a_whole_encoding_would(
    sequence: list[dict[str, Any]], depth: int, batch: int
) -> None:
    encoder = Encoder(depth=depth, batch=batch)
    for body in sequence:
        data = encoder.encode(body)
        assert data == reference(body) == encode(body)
        assert decode(data).body == body


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"p": {"c": {"x": {"v": 1}}}}, {"p": {"c": {"x": {"v": True}}}}),
        ({"p": {"c": {"x": {"a": 1, "b": True}}}}, {"p": {"c": {"x": {"b": 1, "a": True}}}}),
        ({"p": {"c": {"x": [1.0]}}}, {"p": {"c": {"x": [1]}}}),
        ({"p": {"c": {"x": 1, "y": 2}}}, {"p": {"c": {"y": 2}}}),
        ({"p": {"c": {"x": 1}}}, {"p": {3: {"x": 1}}}),
        ({"p": 1}, {"p": {"c": {"x": 1}}}),
    ],
    ids=["int-to-bool", "swapped-keys-and-types", "float-to-int", "removed", "int-key", "deeper"],
)
def test_a_value_equal_to_python_but_not_to_json_is_encoded_anew(
    before: dict[Any, Any], after: dict[Any, Any]
) -> None:
    encoder = Encoder()
    encoder.encode(before)
    assert encoder.encode(after) == reference(after)


def container(n: int) -> dict[str, Any]:
    return {"pool": f"node{n % 2}", "exclusive": str(n), "isolated": False, "memory": n << 20}


def test_steps_yield_between_slices_and_return_the_document() -> None:
    body = {"policy": {"containers": {f"c{n:03}": container(n) for n in range(300)}}}
    encoder = Encoder(batch=50)
    steps = encoder.steps(body)
    slices = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            data = done.value
            break
        slices += 1
    assert data == reference(body)
    body["policy"]["containers"]["c007"] = container(1000)  # one change: mostly reused texts
    again = sum(1 for _ in encoder.steps(body))
    assert again >= 300 // 50  # reusing a text is work too
    assert 2 * again < slices  # new texts cost more than reused ones
