"""Container affinities: which other containers a container wants to be placed near or away from.

An affinity is `{scope, match, weight}`: every other container for which both the `scope` and the
`match` expressions hold adds `weight` to that container's pull. The scope defaults to the same
pod. Affinities come from the pod annotations `resource-policy.nri.io/affinity` (weight +1 by
default) and `resource-policy.nri.io/anti-affinity` (weight -1 by default; a positive weight given
there is negated), each a YAML map from container name to a list of entries:

    resource-policy.nri.io/affinity: |
      web:
        - match: {key: labels/app, operator: In, values: [cache, db]}
          weight: 10
        - scope: {operator: AlwaysTrue}
          match: {key: namespace, operator: Equals, values: [monitoring]}
      sidecar: [web]          # shorthand: same pod, by container name, made symmetric

A shorthand entry (a plain container name) is made symmetric: `sidecar: [web]` also gives `web`
an affinity to `sidecar`. Expression keys: `name`, `namespace`, `qosclass`, `id`, `labels/<k>`
(container labels) and `pod/name`, `pod/namespace`, `pod/qosclass`, `pod/id`, `pod/labels/<k>`.
Operators: Equals, NotEqual, In, NotIn, Exists, NotExist (NotExists accepted), AlwaysTrue,
Matches, MatchesNot, MatchesAny, MatchesNone (shell globs as in fnmatch, case-sensitive).

Implicit colocation (options colocate_pods, colocate_namespaces; weight 10) is added only to
containers without any explicit affinity or anti-affinity.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

import yaml

from nri_topology.policy.types import PolicyError, Request

# libyaml's loader when available: annotations are parsed on every container creation.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DEFAULT_WEIGHT = 1
IMPLICIT_WEIGHT = 10
MAX_WEIGHT = 1000


class Operator(StrEnum):
    EQUALS = "Equals"
    NOT_EQUAL = "NotEqual"
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    NOT_EXIST = "NotExist"
    ALWAYS_TRUE = "AlwaysTrue"
    MATCHES = "Matches"
    MATCHES_NOT = "MatchesNot"
    MATCHES_ANY = "MatchesAny"
    MATCHES_NONE = "MatchesNone"


_OPERATOR_NAMES = {op.value: op for op in Operator} | {"NotExists": Operator.NOT_EXIST}
_ONE_VALUE = {Operator.EQUALS, Operator.NOT_EQUAL, Operator.MATCHES, Operator.MATCHES_NOT}
_NO_VALUE = {Operator.EXISTS, Operator.NOT_EXIST, Operator.ALWAYS_TRUE}
_KEY = re.compile(r"(pod/)?(name|namespace|qosclass|id|labels/.+)")
KEYS_HELP = "name, namespace, qosclass, id, labels/<k>, pod/<same>"


Getter = Callable[[Request], "str | None"]

_GETTERS: dict[str, Getter] = {
    "name": lambda r: r.name,
    "namespace": lambda r: r.namespace,
    "qosclass": lambda r: r.qos.value,
    "id": lambda r: r.container_id,
    "pod/name": lambda r: r.pod_name,
    "pod/namespace": lambda r: r.namespace,
    "pod/qosclass": lambda r: r.qos.value,
    "pod/id": lambda r: r.pod_id,
}


def getter(key: str) -> Getter:
    """How to read expression key `key` from a container (None when it has no such value)."""
    if key.startswith("labels/"):
        label = key.removeprefix("labels/")
        return lambda r: r.labels.get(label)
    if key.startswith("pod/labels/"):
        label = key.removeprefix("pod/labels/")
        return lambda r: r.pod_labels.get(label)
    return _GETTERS.get(key, lambda r: None)


def key_value(req: Request, key: str) -> str | None:
    """The value of expression key `key` for a container, None when it has none."""
    return getter(key)(req)


def _test(key: str, op: Operator, values: tuple[str, ...]) -> Callable[[Request], bool]:
    """The expression as one function, so that matching many containers stays cheap."""
    if op is Operator.ALWAYS_TRUE:
        return lambda r: True
    get = getter(key)
    first = values[0] if values else ""
    members = frozenset(values)
    match op:
        case Operator.EXISTS:
            return lambda r: get(r) is not None
        case Operator.NOT_EXIST:
            return lambda r: get(r) is None
        case Operator.EQUALS:
            return lambda r: get(r) == first
        case Operator.NOT_EQUAL:
            return lambda r: get(r) != first
        case Operator.IN:
            return lambda r: get(r) in members
        case Operator.NOT_IN:
            return lambda r: get(r) not in members

    def globbed(r: Request) -> bool | None:
        value = get(r)
        return None if value is None else any(fnmatchcase(value, p) for p in values)

    if op in (Operator.MATCHES, Operator.MATCHES_ANY):
        return lambda r: bool(globbed(r))
    return lambda r: not globbed(r)  # MatchesNot, MatchesNone: also true without a value


@dataclass(frozen=True, slots=True)
class Expression:
    """A test on one attribute of a container."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()
    evaluate: Callable[[Request], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "evaluate", _test(self.key, self.operator, self.values))


@dataclass(frozen=True, slots=True)
class Affinity:
    """Pull (weight > 0) or push (weight < 0) towards containers matching scope and match."""

    scope: Expression
    match: Expression
    weight: int


ALWAYS = Expression("", Operator.ALWAYS_TRUE)


def same_pod(pod_id: str) -> Expression:
    return Expression("pod/id", Operator.EQUALS, (pod_id,))


class _Invalid(ValueError):
    """A problem in the annotation value, reported with the annotation key by the caller."""


def _expression(raw: Any, where: str) -> Expression:
    if not isinstance(raw, dict):
        raise _Invalid(f"{where}: expected a mapping with key, operator, values")
    unknown = set(raw) - {"key", "operator", "values"}
    if unknown:
        raise _Invalid(f"{where}: unknown field {sorted(map(str, unknown))[0]!r}")
    op_name = raw.get("operator")
    op = _OPERATOR_NAMES.get(op_name) if isinstance(op_name, str) else None
    if op is None:
        raise _Invalid(
            f"{where}.operator: {op_name!r} is not one of {', '.join(o.value for o in Operator)}"
        )
    key = raw.get("key", "")
    if op is not Operator.ALWAYS_TRUE and not (isinstance(key, str) and _KEY.fullmatch(key)):
        raise _Invalid(f"{where}.key: {key!r} is not one of {KEYS_HELP}")
    values = raw.get("values", [])
    if not isinstance(values, list) or not all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in values
    ):
        raise _Invalid(f"{where}.values: expected a list of strings")
    strs = tuple(str(v) for v in values)
    if op in _ONE_VALUE and len(strs) != 1:
        raise _Invalid(f"{where}.values: {op.value} takes exactly one value, got {len(strs)}")
    if op in _NO_VALUE and strs:
        raise _Invalid(f"{where}.values: {op.value} takes no values")
    if op not in _ONE_VALUE | _NO_VALUE and not strs:
        raise _Invalid(f"{where}.values: {op.value} needs at least one value")
    return Expression(key if isinstance(key, str) else "", op, strs)


def _weight(raw: Any, where: str, anti: bool) -> int:
    if raw is None:
        return -DEFAULT_WEIGHT if anti else DEFAULT_WEIGHT
    if not isinstance(raw, int) or isinstance(raw, bool) or abs(raw) > MAX_WEIGHT:
        raise _Invalid(f"{where}.weight: {raw!r} is not an integer from -1000 to 1000")
    return -abs(raw) if anti else raw


@lru_cache(maxsize=1024)
def _entries(text: str) -> dict[str, list[Any]]:
    """The annotation's YAML, checked for shape; cached per text and never mutated."""
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as e:
        raise _Invalid(f"not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _Invalid("expected a map of container name to a list of affinities")
    for name, items in data.items():
        if not isinstance(name, str) or not isinstance(items, list):
            raise _Invalid(f"{name}: expected a list of affinities or container names")
    return data


def parse(
    text: str, *, container: str, pod_id: str, anti: bool, annotation: str, who: str
) -> tuple[Affinity, ...]:
    """The affinities one annotation value gives `container`, shorthand made symmetric.

    The whole value is validated, not only this container's entries, so that every container
    of the pod reports a broken annotation the same way.
    """
    try:
        entries = _entries(text)
        scope = same_pod(pod_id)
        out: list[Affinity] = []
        for name, items in entries.items():
            for i, item in enumerate(items):
                where = f"{name}[{i}]"
                if isinstance(item, str):
                    weight = _weight(None, where, anti)
                    if name == container:
                        out.append(
                            Affinity(scope, Expression("name", Operator.EQUALS, (item,)), weight)
                        )
                    elif item == container:
                        out.append(
                            Affinity(scope, Expression("name", Operator.EQUALS, (name,)), weight)
                        )
                    continue
                if not isinstance(item, dict):
                    raise _Invalid(f"{where}: expected a container name or a mapping")
                unknown = set(item) - {"scope", "match", "weight"}
                if unknown:
                    raise _Invalid(f"{where}: unknown field {sorted(map(str, unknown))[0]!r}")
                if "match" not in item:
                    raise _Invalid(f"{where}: match is required")
                affinity = Affinity(
                    _expression(item["scope"], f"{where}.scope") if "scope" in item else scope,
                    _expression(item["match"], f"{where}.match"),
                    _weight(item.get("weight"), where, anti),
                )
                if name == container:
                    out.append(affinity)
    except _Invalid as e:
        raise PolicyError(f"{who}: annotation {annotation}: {e}") from None
    return tuple(out)


def implicit(
    *, pod_id: str, namespace: str, colocate_pods: bool, colocate_namespaces: bool
) -> tuple[Affinity, ...]:
    """The implicit colocation affinities the options ask for."""
    out: list[Affinity] = []
    if colocate_pods:
        out.append(Affinity(same_pod(pod_id), ALWAYS, IMPLICIT_WEIGHT))
    if colocate_namespaces:
        match = Expression("namespace", Operator.EQUALS, (namespace,))
        out.append(Affinity(ALWAYS, match, IMPLICIT_WEIGHT))
    return tuple(out)


def container_weights(req: Request, others: Iterable[Request]) -> dict[str, int]:
    """Summed affinity weight of `req` towards each other container (non-zero, within ±1000)."""
    affinities = [a for a in req.affinities if isinstance(a, Affinity)]
    if not affinities:
        return {}
    candidates = [o for o in others if o.container_id != req.container_id]
    sums: dict[str, int] = {}
    for a in affinities:
        in_scope, matches, weight = a.scope.evaluate, a.match.evaluate, a.weight
        for other in candidates:
            if in_scope(other) and matches(other):
                sums[other.container_id] = sums.get(other.container_id, 0) + weight
    return {cid: max(-MAX_WEIGHT, min(MAX_WEIGHT, total)) for cid, total in sums.items() if total}
