"""The incremental checkpoint encoder writes exactly what a whole-body JSON encoding would."""

from __future__ import annotations

import hashlib
import json
from typing import Any

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
# often put values equal to Python but different in JSON at the same key.
keys = st.sampled_from(["a", "b", "c", "é", "0"])
scalars = st.sampled_from([0, 0.0, False, 1, 1.0, True, None, "", "x", -5, 2.5])
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=12,
)
entries = st.dictionaries(keys, values.filter(lambda v: v is not None), max_size=5)
bodies = st.tuples(st.dictionaries(keys, values, max_size=3), entries)
PATH = ("policy", "containers")


def whole(rest: dict[str, Any], entries: dict[str, Any]) -> dict[str, Any]:
    """A body with the map of entries at PATH, next to other parts."""
    return {**rest, "policy": {"version": 1, "containers": entries}}


def changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What an owner of the entries reports: every entry whose JSON differs, None for removed."""
    out: dict[str, Any] = {k: None for k in old if k not in new}
    for k, v in new.items():
        if k not in old or json.dumps(old[k]) != json.dumps(v):
            out[k] = v
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(bodies, min_size=1, max_size=6), st.integers(1, 4), st.booleans())
def test_every_body_of_a_sequence_encodes_as_a_whole_encoding_would(
    sequence: list[tuple[dict[str, Any], dict[str, Any]]], batch: int, first_changed: bool
) -> None:
    encoder = Encoder(PATH, batch=batch)
    before: dict[str, Any] = {}
    for n, (rest, now) in enumerate(sequence):
        body = whole(rest, now)
        if n == 0 and not first_changed:
            data = encoder.encode(body)  # every entry from the body
        else:
            data = encoder.encode(whole(rest, {}), changes(before, now))
        assert data == reference(body) == encode(body)
        assert decode(data).body == body
        before = now


def test_an_entry_is_encoded_anew_only_when_named_changed() -> None:
    encoder = Encoder(PATH)
    encoder.encode(whole({}, {"x": {"v": 1}, "y": {"v": 2}}))
    data = encoder.encode(whole({}, {}), {"y": {"v": True}})
    assert decode(data).body == whole({}, {"x": {"v": 1}, "y": {"v": True}})


def test_without_a_path_the_body_is_encoded_whole() -> None:
    body = {"n": 3, "containers": {"c": {"v": 1.0}}}
    assert Encoder().encode(body) == reference(body)


def container(n: int) -> dict[str, Any]:
    return {"pool": f"node{n % 2}", "exclusive": str(n), "isolated": False, "memory": n << 20}


def test_steps_yield_between_slices_and_return_the_document() -> None:
    body = whole({}, {f"c{n:03}": container(n) for n in range(300)})
    encoder = Encoder(PATH, batch=50)
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
    assert slices >= 300 // 50
    again = sum(1 for _ in encoder.steps(whole({}, {}), {"c007": container(1000)}))
    assert again < slices  # one change: one entry encoded
