"""Readers for text a pod author controls (annotation values): YAML and JSON at bounded cost.

libyaml's composer recurses on the C stack once per nesting level, so a value of 30 000 nested
brackets crashes the process; aliases expand a few bytes into millions of nodes; Python's `int()`
raises an unexpected ValueError beyond 4300 digits and `json` a RecursionError on deep nesting.
`load_yaml` therefore builds the value itself from libyaml's event stream (an iterative state
machine) with an explicit stack, and refuses anchors, aliases, explicit tags, more than one
document, duplicate keys, nesting deeper than `MAX_DEPTH`, more than `MAX_NODES` values and
numbers longer than `MAX_NUMBER_CHARS`. `load_json` checks the nesting depth before
`json.loads` sees the text and bounds its numbers the same way. The caller bounds the size of
the text.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

# Our deepest annotation (affinity: map, list, rule, expression, values) nests 5 levels.
MAX_DEPTH = 16
# Values (scalars, maps and lists) in one YAML document: parsing time grows with their number
# (benchmarks/README.md), and the largest affinity the other limits allow holds about 450.
MAX_NODES = 1024
# Longer than any amount or weight a pod needs, far below the 4300 digits Python refuses.
MAX_NUMBER_CHARS = 32

_PARSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # events only: libyaml when available
_RESOLVER = Resolver()
_CONSTRUCTOR = SafeConstructor()
_FIRST_CHARS = frozenset(_RESOLVER.yaml_implicit_resolvers) | {""}
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_SCALARS = {
    _INT: _CONSTRUCTOR.construct_yaml_int,
    _FLOAT: _CONSTRUCTOR.construct_yaml_float,
    "tag:yaml.org,2002:bool": _CONSTRUCTOR.construct_yaml_bool,
    "tag:yaml.org,2002:null": _CONSTRUCTOR.construct_yaml_null,
}


class Refused(ValueError):
    """Text refused by a reader; `limit` names the bound it broke, "" for plain bad syntax."""

    def __init__(self, message: str, limit: str = "") -> None:
        super().__init__(message)
        self.limit = limit


def _scalar(event: yaml.ScalarEvent) -> Any:
    """A plain scalar resolved as YAML 1.1 does (int, float, bool, null), else its text."""
    value = event.value
    if event.style or not event.implicit[0] or value[:1] not in _FIRST_CHARS:
        return value
    tag = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))
    construct = _SCALARS.get(tag)
    if construct is None:
        return value  # str, and timestamps or merge keys kept as text
    if tag in (_INT, _FLOAT) and len(value) > MAX_NUMBER_CHARS:
        raise Refused(f"a number of {len(value)} characters (at most {MAX_NUMBER_CHARS})", "number")
    return construct(yaml.ScalarNode(tag, value))


class _Frame:
    """A mapping or sequence being built, and for a mapping the key waiting for its value."""

    __slots__ = ("items", "key", "keyed")

    def __init__(self, items: dict[Any, Any] | list[Any]) -> None:
        self.items = items
        self.key: Any = None
        self.keyed = False

    def add(self, value: Any) -> None:
        items = self.items
        if isinstance(items, list):
            items.append(value)
        elif not self.keyed:
            if isinstance(value, dict | list):
                raise Refused("a mapping key must be a scalar")
            if value in items:
                raise Refused(f"duplicate key {str(value)[:64]!r}")
            self.key, self.keyed = value, True
        else:
            items[self.key] = value
            self.keyed = False


_NODE_EVENTS = (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)
# How libyaml names its own nesting bound ("exceeded maximum nesting depth").
_NESTING = "nesting depth"


def _annotated(event: yaml.NodeEvent) -> Refused:
    if event.anchor is not None:
        return Refused("YAML anchors are not accepted", "aliases")
    return Refused("YAML tags are not accepted")


def load_yaml(text: str) -> Any:
    """The value of one YAML document without anchors, aliases or tags; raises `Refused`."""
    stack: list[_Frame] = []
    result: Any = None
    documents = 0
    nodes = 0
    try:
        for event in yaml.parse(text, Loader=_PARSER):
            kind = type(event)
            if kind in _NODE_EVENTS:
                nodes += 1
                if nodes > MAX_NODES:
                    raise Refused(f"more than {MAX_NODES} values", "nodes")
            if kind is yaml.ScalarEvent:
                if event.anchor is not None or event.tag is not None:
                    raise _annotated(event)
                value = _scalar(event)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                if event.anchor is not None or event.tag is not None:
                    raise _annotated(event)
                if len(stack) >= MAX_DEPTH:
                    raise Refused(f"nested deeper than {MAX_DEPTH} levels", "depth")
                stack.append(_Frame({} if kind is yaml.MappingStartEvent else []))
                continue
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                value = stack.pop().items
            elif kind is yaml.AliasEvent:
                raise Refused("YAML aliases are not accepted", "aliases")
            elif kind is yaml.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise Refused("more than one YAML document")
                continue
            else:
                continue
            if stack:
                stack[-1].add(value)
            else:
                result = value
    except yaml.YAMLError as e:
        if _NESTING in str(getattr(e, "problem", "")):
            # libyaml >= 0.2.6 bounds nesting itself, in its scanner, before our events see it.
            raise Refused(f"nested deeper than {MAX_DEPTH} levels", "depth") from None
        raise Refused(f"not valid YAML ({str(e).splitlines()[0]})") from None
    except (ValueError, TypeError, OverflowError) as e:
        if isinstance(e, Refused):
            raise
        raise Refused(f"not valid YAML ({e})") from None
    return result


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_JSON_BRACKETS = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of brackets outside strings (without recursion)."""
    depth = deepest = 0
    for bracket in _JSON_BRACKETS.findall(_JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _json_number(text: str) -> Any:
    if len(text) > MAX_NUMBER_CHARS:
        raise Refused(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})", "number")
    return float(text) if any(c in text for c in ".eE") else int(text)


def _json_constant(name: str) -> Any:
    raise Refused(f"{name} is not a JSON number")


def load_json(text: str) -> Any:
    """The value of a JSON text with bounded nesting and numbers; raises `Refused`."""
    if json_depth(text) > MAX_DEPTH:
        raise Refused(f"nested deeper than {MAX_DEPTH} levels", "depth")
    try:
        return json.loads(
            text,
            parse_int=_json_number,
            parse_float=_json_number,
            parse_constant=_json_constant,
        )
    except Refused:
        raise
    except (ValueError, RecursionError) as e:
        raise Refused(f"not valid JSON ({str(e).splitlines()[0][:80]})") from None


class TextCache:
    """Results computed from annotation texts, least recently used first out, bounded by the total
    length of the texts (what a pod author controls) rather than by a count of entries.

    Results (and refusals) are small next to their text because aliases are refused, so the bound
    on text also bounds the memory the results hold. The only cache of annotation contents.
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._entries: OrderedDict[Hashable, tuple[int, Any]] = OrderedDict()
        self._chars = 0

    def get(self, key: Hashable, chars: int, compute: Callable[[], Any]) -> Any:
        """compute() for `key` (whose texts are `chars` long), once while it stays cached; an
        exception compute() raises is cached and raised again the same way."""
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            result = hit[1]
        else:
            try:
                result = compute()
            except Exception as e:  # cached like a value: a refusal costs one parse
                result = _Raised(e)
            if chars <= self.max_chars:
                self._entries[key] = (chars, result)
                self._chars += chars
                while self._chars > self.max_chars:
                    _, (dropped, _) = self._entries.popitem(last=False)
                    self._chars -= dropped
        if isinstance(result, _Raised):
            raise result.fresh()
        return result

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def chars(self) -> int:
        return self._chars


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

    def fresh(self) -> Exception:
        """The error without the traceback and context of an earlier raise (they would pile up)."""
        self.error.__traceback__ = None
        self.error.__context__ = None
        return self.error


# Room for 16 annotation values of the default maximum size.
CACHE = TextCache(max_chars=16 * 16384)
