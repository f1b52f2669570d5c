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
from collections.abc import Iterable
from dataclasses import dataclass
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


def key_value(req: Request, key: str) -> str | None:
    """The value of expression key `key` for a container, None when it has none."""
    pod, _, rest = key.partition("/") if key.startswith("pod/") else ("", "", key)
    if rest.startswith("labels/"):
        labels = req.pod_labels if pod else req.labels
        return labels.get(rest.removeprefix("labels/"))
    match rest:
        case "name":
            return req.pod_name if pod else req.name
        case "namespace":
            return req.namespace
        case "qosclass":
            return req.qos.value
        case "id":
            return req.pod_id if pod else req.container_id
    return None


@dataclass(frozen=True, slots=True)
class Expression:
    """A test on one attribute of a container."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def evaluate(self, req: Request) -> bool:
        op = self.operator
        if op is Operator.ALWAYS_TRUE:
            return True
        value = key_value(req, self.key)
        match op:
            case Operator.EXISTS:
                return value is not None
            case Operator.NOT_EXIST:
                return value is None
            case Operator.EQUALS:
                return value == self.values[0]
            case Operator.NOT_EQUAL:
                return value != self.values[0]
            case Operator.IN:
                return value in self.values
            case Operator.NOT_IN:
                return value not in self.values
            case Operator.MATCHES:
                return value is not None and fnmatchcase(value, self.values[0])
            case Operator.MATCHES_NOT:
                return value is None or not fnmatchcase(value, self.values[0])
            case Operator.MATCHES_ANY:
                return value is not None and any(fnmatchcase(value, p) for p in self.values)
            case _:  # MATCHES_NONE
                return value is None or not any(fnmatchcase(value, p) for p in self.values)


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
    weights: dict[str, int] = {}
    affinities = [a for a in req.affinities if isinstance(a, Affinity)]
    if not affinities:
        return weights
    for other in others:
        if other.container_id == req.container_id:
            continue
        total = sum(
            a.weight for a in affinities if a.scope.evaluate(other) and a.match.evaluate(other)
        )
        total = max(-MAX_WEIGHT, min(MAX_WEIGHT, total))
        if total:
            weights[other.container_id] = total
    return weights
