"""A parsed document (YAML's or JSON's mappings, lists and scalars) into a msgspec Struct, with
every problem named by its key, in the plugin's own words.

msgspec checks each value against its type and bounds; this module walks the document so that
one bad key does not hide the others (msgspec stops at the first), applies the `Before`
readings fields carry, and says what msgspec found the way the rest of the plugin's messages say
it ("expected at least 1, got 0"). The configuration file and the simulator's machine
descriptions and workload files are read through it.
"""

from __future__ import annotations

import enum
import json
import re
import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec

Loc = tuple[int | str, ...]
T = TypeVar("T", bound=msgspec.Struct)


class Before:
    """A field's reading of the value as written, before its type is checked; it raises
    `ValueError` (or `Problem`, to point inside the value) for what it cannot read. `schema`
    is the JSON Schema of what it accepts, where that is more than the field's type."""

    def __init__(self, read: Callable[[Any], Any], schema: dict[str, Any] | None = None) -> None:
        self.read = read
        self.schema = schema


class Problem(ValueError):
    """A value refused by a `Before`; `at` is the place inside the value (a mapping key is
    followed by "[key]" where the key itself is at fault)."""

    def __init__(self, message: str, at: Loc = ()) -> None:
        super().__init__(message)
        self.at = at


class Invalid(ValueError):
    """A document refused; one (place, problem) per problem, in the order of the schema."""

    def __init__(self, problems: list[tuple[Loc, str]]) -> None:
        super().__init__("; ".join(f"{dotted(loc)}: {why}" for loc, why in problems))
        self.problems = tuple(problems)


def convert(cls: type[T], data: object) -> T:
    """`data` as a `cls`, or `Invalid` naming every problem."""
    problems: list[tuple[Loc, str]] = []
    value = _struct(cls, data, (), problems)
    if problems:
        raise Invalid(problems)
    return value


def as_document(value: msgspec.Struct) -> dict[str, Any]:
    """A Struct as the plain mappings and lists JSON would carry: what a file could say."""
    return msgspec.json.decode(msgspec.json.encode(value))


def keys(cls: type[msgspec.Struct]) -> tuple[str, ...]:
    """A Struct's keys, in the order it declares them."""
    return cls.__struct_fields__


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


def struct_of(tp: Any) -> type[msgspec.Struct] | None:
    """The Struct a field holds (`S` or `S | None`), or None for any other value."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return tp
    if get_origin(tp) in _UNIONS:
        held = [struct_of(a) for a in get_args(tp) if a is not type(None)]
        if len(held) == 1:
            return held[0]
    return None


_BAD = object()
_UNIONS = (Union, types.UnionType)
_Problems = list[tuple[Loc, str]]


def _struct(cls: type[msgspec.Struct], data: object, loc: Loc, problems: _Problems) -> Any:
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
        value = _value(field.type, data[field.name], here, problems)
        if value is not _BAD:
            values[field.name] = value
    for key in data:
        if key not in cls.__struct_fields__:
            allowed = ", ".join(cls.__struct_fields__)
            problems.append(((*loc, key), f"unknown key; allowed: {allowed}"))
    if len(problems) > before:
        return _BAD
    try:
        return cls(**values)
    except ValueError as e:  # the Struct's own check of its keys together (`__post_init__`)
        problems.append((loc, str(e)))
        return _BAD


def _value(tp: Any, value: object, loc: Loc, problems: _Problems, *, key: bool = False) -> Any:
    """`value` as type `tp`: Befores applied, Structs and containers of them walked."""
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
    if get_origin(base) in _UNIONS and type(None) in get_args(base):
        if value is None:
            return None
        rest = [a for a in get_args(base) if a is not type(None)]
        if len(rest) == 1:
            return _value(rest[0], value, loc, problems, key=key)
    held = struct_of(base)
    if held is not None:
        return _struct(held, value, loc, problems)
    origin = get_origin(base)
    if origin in (list, tuple, dict) and (origin is dict or _walked(base)):
        shape: Any = dict[Any, Any] if origin is dict else list[Any]
        if extras:  # the container's own bounds
            shape = Annotated[(shape, *extras)]
        if _checked(shape, value, loc, problems) is _BAD:
            return _BAD
        return _container(base, value, loc, problems)
    return _checked(tp, value, loc, problems, strict=not key)


def _container(tp: Any, value: Any, loc: Loc, problems: _Problems) -> Any:
    """A list, tuple or mapping checked item by item, so that each is named (msgspec names no
    mapping key)."""
    before = len(problems)
    origin, args = get_origin(tp), get_args(tp)
    if origin is dict:
        out: Any = {
            _value(args[0], k, (*loc, str(k), "[key]"), problems, key=True): _value(
                args[1], v, (*loc, str(k)), problems
            )
            for k, v in value.items()
        }
    else:
        out = origin(_value(args[0], v, (*loc, i), problems) for i, v in enumerate(value))
    return _BAD if len(problems) > before else out


def _walked(tp: Any) -> bool:
    """Whether a type holds a Before or a Struct, which msgspec alone would not apply."""
    if get_origin(tp) is Annotated:
        if any(isinstance(x, Before) for x in get_args(tp)[1:]):
            return True
        tp = get_args(tp)[0]
    if struct_of(tp) is not None:
        return True
    return any(_walked(a) for a in get_args(tp) if a is not Ellipsis)


def _checked(tp: Any, value: object, loc: Loc, problems: _Problems, strict: bool = True) -> Any:
    """`value` as msgspec converts it to `tp`, or _BAD with the problem noted. Mapping keys are
    read leniently: JSON writes every key as a string."""
    try:
        return msgspec.convert(value, tp, strict=strict)
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
    for _ in at:  # an index into a list or tuple
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
        arg = _plain(arg)
        if arg is bool:
            words += ["true", "false"]
        elif get_origin(arg) is Literal:
            words += [repr(a) for a in get_args(arg)]
        elif isinstance(arg, type) and issubclass(arg, enum.Enum):
            words += [repr(m.value) for m in arg]
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
    """msgspec's `message` about the value `got` of type `tp`, in the plugin's words."""
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
    if m := re.fullmatch(r"Expected `(str|array|object)` of length ([<>]=) (\d+)", message):
        unit = {"str": "characters", "array": "items", "object": "keys"}[m[1]]
        return f"expected {_BOUNDS[m[2]]} {m[3]} {unit}, got {said}"
    if m := re.fullmatch(r"Expected `str` matching regex '(.*)'", message):
        return f"expected text matching {m[1]}, got {said}"
    return f"{message[:1].lower()}{message[1:]}, got {said}"


def _number(text: str) -> str:
    """A bound as the schema writes it: 0.0 as 0."""
    return text.removesuffix(".0") if re.fullmatch(r"-?\d+\.0", text) else text
