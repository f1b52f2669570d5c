"""A parsed document into a `Config`, with every problem named by its key, in the file's words.

msgspec checks each key's value against its type and bounds; this module walks the sections so
that one bad key does not hide the others (msgspec stops at the first), applies the fields'
`Before` readings, and says what msgspec found the way the rest of the configuration's messages
say it ("expected at least 1, got 0").
"""

from __future__ import annotations

import json
import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec

from nri_topology.config.schema import Before, Config, Problem

Loc = tuple[int | str, ...]


class Invalid(ValueError):
    """A document the configuration refuses; one (key, problem) per problem."""

    def __init__(self, problems: list[tuple[Loc, str]]) -> None:
        super().__init__("; ".join(f"{dotted(loc)}: {why}" for loc, why in problems))
        self.problems = tuple(problems)


def to_config(data: object) -> Config:
    """`data` (mappings, lists and scalars, as YAML or JSON gives them) as a `Config`."""
    problems: list[tuple[Loc, str]] = []
    config = _struct(Config, data, (), problems)
    if problems:
        raise Invalid(problems)
    return config


def as_document(value: msgspec.Struct) -> dict[str, Any]:
    """A section (or the whole `Config`) as the plain mappings and lists JSON would carry: what
    the file could say to mean it."""
    return msgspec.json.decode(msgspec.json.encode(value))


def keys(section: type[msgspec.Struct]) -> tuple[str, ...]:
    """A section's keys, in the order the schema declares them."""
    return section.__struct_fields__


def dotted(loc: Loc) -> str:
    """A place in the document as the messages name it: policy.default_memory_tiers[1]."""
    out = ""
    for part in loc:
        if part == "[key]":
            out += " (the key)"
        elif isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


_BAD = object()
_UNIONS = (Union, types.UnionType)


def section_of(tp: Any) -> type[msgspec.Struct] | None:
    """The section a field holds (`Section` or `Section | None`), or None for a plain value."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp
    if get_origin(tp) in _UNIONS:
        sections = [
            a for a in get_args(tp) if isinstance(a, type) and issubclass(a, msgspec.Struct)
        ]
        if len(sections) == 1:
            return sections[0]
    return None


def _struct(cls: type[msgspec.Struct], data: object, loc: Loc, problems: list) -> Any:
    if not isinstance(data, dict):
        problems.append((loc, f"expected a mapping of keys, got {shown(data)}"))
        return _BAD
    before = len(problems)
    values: dict[str, Any] = {}
    for field in msgspec.structs.fields(cls):
        here = (*loc, field.name)
        if field.name not in data:
            if field.required:
                problems.append((here, "required key is missing"))
            continue
        value = _field(field.type, data[field.name], here, problems)
        if value is not _BAD:
            values[field.name] = value
    for key in data:
        if key not in cls.__struct_fields__:
            allowed = ", ".join(cls.__struct_fields__)
            problems.append(((*loc, key), f"unknown key; allowed: {allowed}"))
    return _BAD if len(problems) > before else cls(**values)


def _field(tp: Any, value: object, loc: Loc, problems: list) -> Any:
    base, extras = tp, ()
    if get_origin(tp) is Annotated:
        base, *extras = get_args(tp)
    for extra in extras:
        if isinstance(extra, Before):
            try:
                value = extra.read(value)
            except Problem as e:
                problems.append(((*loc, *e.at), str(e)))
                return _BAD
            except ValueError as e:
                problems.append((loc, str(e)))
                return _BAD
    section = section_of(base)
    if section is not None and value is not None:
        return _struct(section, value, loc, problems)
    if get_origin(base) is dict and isinstance(value, dict):  # by key: msgspec names none
        key_type, value_type = get_args(base)
        before = len(problems)
        entries = {
            _checked(key_type, k, (*loc, str(k), "[key]"), problems): _checked(
                value_type, v, (*loc, str(k)), problems
            )
            for k, v in value.items()
        }
        return _BAD if len(problems) > before else entries
    return _checked(tp, value, loc, problems)


def _checked(tp: Any, value: object, loc: Loc, problems: list) -> Any:
    """`value` as msgspec converts it to `tp`, or _BAD with the problem noted."""
    try:
        return msgspec.convert(value, tp)
    except msgspec.ValidationError as e:
        at, message = _split(str(e))
        got = _at(value, at)
        problems.append(((*loc, *at), _said(message, got, _type_at(tp, at))))
        return _BAD


_PATH = re.compile(r" - at `\$((?:\.\w+|\[\d+\])*)`$")


def _split(message: str) -> tuple[Loc, str]:
    """msgspec's message as (place inside the value, what is wrong)."""
    m = _PATH.search(message)
    if m is None:
        return (), message
    at: list[int | str] = []
    for name, index in re.findall(r"\.(\w+)|\[(\d+)\]", m.group(1)):
        at.append(int(index) if index else name)
    return tuple(at), message[: m.start()]


def _at(value: Any, at: Loc) -> Any:
    for part in at:
        value = value[part]
    return value


def _type_at(tp: Any, at: Loc) -> Any:
    for _ in at:  # an index into a tuple
        tp = get_args(_plain(tp))[0]
    return _plain(tp)


def _plain(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _choices(tp: Any) -> str:
    """A field's choices as a message lists them: 'dram', 'pmem', 'hbm' or 'cxl'."""
    words: list[str] = []
    for arg in get_args(tp) if get_origin(tp) in _UNIONS else (tp,):
        if arg is bool:
            words += ["true", "false"]
        elif get_origin(arg) is Literal:
            words += [repr(a) for a in get_args(arg)]
    return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else "".join(words)


_TYPES = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "array": "a list",
    "object": "a mapping of keys",
    "null": "null",
}
_BOUNDS = {">=": "at least", "<=": "at most", ">": "more than", "<": "less than"}


def _said(message: str, got: Any, tp: Any) -> str:
    """msgspec's `message` about the value `got` of type `tp`, in the configuration's words."""
    said = shown(got)
    choices = _choices(tp)
    if choices and (message.startswith("Invalid enum value") or " | " in message):
        return f"expected one of {choices}, got {said}"
    if m := re.fullmatch(r"Expected `([\w |]+)`, got `\w+`", message):
        kinds = [_TYPES.get(k, k) for k in m[1].split(" | ")]
        return f"expected {' or '.join(kinds)}, got {said}"
    if m := re.fullmatch(r"Expected `(?:int|float)` (>=|<=|>|<) (\S+)", message):
        return f"expected {_BOUNDS[m[1]]} {_number(m[2])}, got {said}"
    if message == "Expected `str` of length >= 1":
        return "expected a non-empty string"
    if message == "Expected `array` of length >= 1":
        return "expected at least one item"
    if m := re.fullmatch(r"Expected `str` matching regex '(.*)'", message):
        return f"expected text matching {m[1]}, got {said}"
    return f"{message[:1].lower()}{message[1:]}, got {said}"


def _number(text: str) -> str:
    """A bound as the schema writes it: 0.0 as 0."""
    return text.removesuffix(".0") if re.fullmatch(r"-?\d+\.0", text) else text


def shown(value: Any) -> str:
    """A value as a message shows it: JSON for scalars, "a mapping" or "a list" for the rest."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    try:
        return json.dumps(value)
    except TypeError:
        return repr(value)
