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

Cost is bounded: the value is read by `bounded.load_yaml` (no anchors, aliases or deep nesting),
an expression takes at most `AnnotationLimits.max_affinity_values` values of at most
`MAX_PATTERN_CHARS` characters, and `Index` evaluates an expression once against the distinct
values of its key among the live containers instead of once per container (a key it does not
hold yet costs one walk over the live containers to index, at most two keys a rule).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase, translate
from typing import Any

from nri_topology.policy.intake.annotations import SHOWN_CHARS, shown
from nri_topology.policy.intake.bounded import CACHE, Refused, load_yaml
from nri_topology.policy.options import AnnotationLimits
from nri_topology.policy.types import AnnotationError, Request

DEFAULT_WEIGHT = 1
IMPLICIT_WEIGHT = 10
MAX_WEIGHT = 1000
MAX_PATTERN_CHARS = 253  # a DNS subdomain name, the longest Kubernetes object name
MAX_PATTERN_WILDCARDS = 4  # each one may rescan the value: bounded regex work per value


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
_WILDCARD = re.compile(r"[*?\[]")
_GLOBS = {Operator.MATCHES, Operator.MATCHES_ANY, Operator.MATCHES_NOT, Operator.MATCHES_NONE}
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
    glob: Glob | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "evaluate", _test(self.key, self.operator, self.values))
        glob = Glob.of(self.values) if self.operator in _GLOBS else None
        object.__setattr__(self, "glob", glob)


@dataclass(frozen=True, slots=True)
class Glob:
    """Patterns sorted by cost: without wildcards (a lookup), `*` (every value), and the rest as
    one regex (one match per distinct value)."""

    exact: frozenset[str]
    everything: bool
    wild: Callable[[str], object] | None
    wildcards: int  # patterns with wildcards: what `max_affinity_globs` counts

    @staticmethod
    def of(patterns: Iterable[str]) -> Glob:
        wild = tuple(p for p in patterns if _WILDCARD.search(p))
        rx = None
        if wild:  # translating long patterns costs more than matching them: once per set
            rx = CACHE.get(("glob", wild), sum(map(len, wild)), lambda: _compiled(wild))
        return Glob(frozenset(patterns) - set(wild), "*" in wild, rx, len(wild))


def _compiled(patterns: tuple[str, ...]) -> Callable[[str], object]:
    return re.compile("|".join(f"(?:{translate(p)})" for p in patterns)).match


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
    """A problem in the annotation value, reported with the annotation key by the caller;
    `limit` names the bound it broke, "" when the value is merely invalid."""

    def __init__(self, message: str, limit: str = "") -> None:
        super().__init__(message)
        self.limit = limit


def _expression(raw: Any, where: str, max_values: int) -> Expression:
    if not isinstance(raw, dict):
        raise _Invalid(f"{where}: expected a mapping with key, operator, values")
    unknown = set(raw) - {"key", "operator", "values"}
    if unknown:
        raise _Invalid(f"{where}: unknown field {shown(sorted(map(str, unknown))[0])}")
    op_name = raw.get("operator")
    op = _OPERATOR_NAMES.get(op_name) if isinstance(op_name, str) else None
    if op is None:
        raise _Invalid(
            f"{where}.operator: {shown(op_name)} is not one of "
            f"{', '.join(o.value for o in Operator)}"
        )
    key = raw.get("key", "")
    if op is not Operator.ALWAYS_TRUE and not (isinstance(key, str) and _KEY.fullmatch(key)):
        raise _Invalid(f"{where}.key: {shown(key)} is not one of {KEYS_HELP}")
    values = raw.get("values", [])
    if not isinstance(values, list) or not all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in values
    ):
        raise _Invalid(f"{where}.values: expected a list of strings")
    if len(values) > max_values:
        raise _Invalid(
            f"{where}.values: {len(values)} values, the limit is {max_values} "
            "(policy.annotation_limits.max_affinity_values)",
            "values",
        )
    strs = tuple(str(v) for v in values)
    long = next((v for v in strs if len(v) > MAX_PATTERN_CHARS), None)
    if long is not None:
        raise _Invalid(
            f"{where}.values: {shown(long)} is longer than {MAX_PATTERN_CHARS} characters",
            "pattern",
        )
    wild = next((v for v in strs if len(_WILDCARD.findall(v)) > MAX_PATTERN_WILDCARDS), None)
    if wild is not None and op in _GLOBS:
        raise _Invalid(
            f"{where}.values: {shown(wild)} has more than {MAX_PATTERN_WILDCARDS} wildcards",
            "pattern",
        )
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
        raise _Invalid(f"{where}.weight: {shown(raw)} is not an integer from -1000 to 1000")
    return -abs(raw) if anti else raw


def _cut(name: object) -> str:
    text = str(name)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}…"


def _entries(text: str) -> dict[str, list[Any]]:
    """The annotation's YAML, checked for shape."""
    try:
        data = load_yaml(text)
    except Refused as e:
        raise _Invalid(str(e), e.limit) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _Invalid("expected a map of container name to a list of affinities")
    for name, items in data.items():
        if not isinstance(name, str) or not isinstance(items, list):
            raise _Invalid(f"{_cut(name)}: expected a list of affinities or container names")
    return data


# One entry of an annotation: a shorthand container name, or (scope or None for the same pod,
# match, weight).
_Item = str | tuple[Expression | None, Expression, int]


def _validated(text: str, anti: bool, max_values: int) -> tuple[tuple[str, tuple[_Item, ...]], ...]:
    """Every entry of the annotation checked and turned into expressions, for any container."""
    out: list[tuple[str, tuple[_Item, ...]]] = []
    for name, items in _entries(text).items():
        checked: list[_Item] = []
        for i, item in enumerate(items):
            where = f"{_cut(name)}[{i}]"
            if isinstance(item, str):
                checked.append(item)
                continue
            if not isinstance(item, dict):
                raise _Invalid(f"{where}: expected a container name or a mapping")
            unknown = set(item) - {"scope", "match", "weight"}
            if unknown:
                raise _Invalid(f"{where}: unknown field {shown(sorted(map(str, unknown))[0])}")
            if "match" not in item:
                raise _Invalid(f"{where}: match is required")
            scope = (
                _expression(item["scope"], f"{where}.scope", max_values)
                if "scope" in item
                else None
            )
            match = _expression(item["match"], f"{where}.match", max_values)
            checked.append((scope, match, _weight(item.get("weight"), where, anti)))
        out.append((name, tuple(checked)))
    return tuple(out)


def parse(
    text: str,
    *,
    container: str,
    pod_id: str,
    anti: bool,
    annotation: str,
    who: str,
    max_values: int = AnnotationLimits().max_affinity_values,
) -> tuple[Affinity, ...]:
    """The affinities one annotation value gives `container`, shorthand made symmetric.

    The whole value is validated, not only this container's entries, so that every container
    of the pod reports a broken annotation the same way; the validated form is cached per text.
    """
    try:
        entries = CACHE.get(
            ("affinity", text, anti, max_values),
            len(text),
            lambda: _validated(text, anti, max_values),
        )
    except _Invalid as e:
        limit = f" (limit: {e.limit})" if e.limit else ""
        raise AnnotationError(
            f"{who}: annotation {annotation}: {e}{limit}", key=annotation, limit=e.limit
        ) from None
    scope = same_pod(pod_id)
    default = -DEFAULT_WEIGHT if anti else DEFAULT_WEIGHT
    out: list[Affinity] = []
    for name, items in entries:
        for item in items:
            if isinstance(item, str):
                if name == container:
                    out.append(
                        Affinity(scope, Expression("name", Operator.EQUALS, (item,)), default)
                    )
                elif item == container:
                    out.append(
                        Affinity(scope, Expression("name", Operator.EQUALS, (name,)), default)
                    )
            elif name == container:
                out.append(Affinity(item[0] or scope, item[1], item[2]))
    return tuple(out)


def glob_patterns(affinities: Iterable[Affinity]) -> int:
    """Glob patterns with wildcards in the affinities: the part of their cost that is not a
    lookup (each is matched against every distinct value of its key)."""
    return sum(
        e.glob.wildcards for a in affinities for e in (a.scope, a.match) if e.glob is not None
    )


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


def _named(req: Request) -> set[str]:
    """The expression keys a container's affinities test (ALWAYS tests none)."""
    return {
        e.key
        for a in req.affinities
        if isinstance(a, Affinity)
        for e in (a.scope, a.match)
        if e.operator is not Operator.ALWAYS_TRUE
    }


_NONE: frozenset[str] = frozenset()


class _Key:
    """The live containers by their value of one expression key."""

    __slots__ = ("by", "get", "has")

    def __init__(self, key: str, live: Iterable[Request]) -> None:
        self.get = get = getter(key)
        self.by: dict[str, set[str]] = {}  # value -> container ids
        self.has: set[str] = set()  # ids of containers with a value
        by, has = self.by, self.has
        for req in live:  # `add` inlined: a key is indexed while a decision waits for it
            value = get(req)
            if value is not None:
                cid = req.container_id
                ids = by.get(value)
                if ids is None:
                    by[value] = {cid}
                else:
                    ids.add(cid)
                has.add(cid)

    def add(self, req: Request) -> None:
        value = self.get(req)
        if value is not None:
            cid = req.container_id
            self.by.setdefault(value, set()).add(cid)
            self.has.add(cid)

    def remove(self, req: Request) -> None:
        value = self.get(req)
        if value is not None:
            cid = req.container_id
            ids = self.by[value]
            ids.discard(cid)
            if not ids:
                del self.by[value]
            self.has.discard(cid)


# Keys kept indexed that no live container's affinities test: enough for the few keys affinities
# usually test (pod, name, an app label), few enough that every add and remove, which pays for
# each indexed key, stays cheap.
SPARE_KEYS = 4


class Index:
    """The live containers by the value of expression keys, so that an expression is answered
    by dictionary lookups (Equals, In, Exists and their negations) or by one glob match per
    distinct value (Matches...), not by evaluating it on every container. Agrees with
    `container_weights`, which states the meaning; the engine keeps it in step with its grants.

    Only keys that affinities test are indexed, since nearly every container has none: a key is
    indexed by the first `weights` that tests it (one walk over the live containers), then kept
    while a live container's affinities test it; after that it is one of at most `spare` keys
    kept, the most recently asked for, so that containers with the same affinities coming and
    going one at a time (replicas of a deployment, jobs) do not walk every time.
    """

    def __init__(self, spare: int = SPARE_KEYS) -> None:
        self._live: dict[str, Request] = {}
        self.all: Set[str] = self._live.keys()
        self._keys: dict[str, _Key] = {}  # the indexed keys
        self._named: dict[str, int] = {}  # key -> live containers whose affinities test it
        self._spare: dict[str, None] = {}  # indexed keys not in _named, least recently asked first
        self._spare_max = spare

    def add(self, req: Request) -> None:
        cid = req.container_id
        if cid in self._live:
            self.remove(cid)
        self._live[cid] = req
        for index in self._keys.values():
            index.add(req)
        if req.affinities:
            named = self._named
            for key in _named(req):
                named[key] = named.get(key, 0) + 1
                self._spare.pop(key, None)

    def remove(self, cid: str) -> None:
        req = self._live.pop(cid, None)
        if req is None:
            return
        for index in self._keys.values():
            index.remove(req)
        if req.affinities:
            named = self._named
            for key in _named(req):
                named[key] -= 1
                if not named[key]:
                    del named[key]
                    if key in self._keys:
                        self._spare[key] = None
            self._trim()

    def _index(self, keys: Set[str]) -> None:
        """Index `keys`, each now the most recently asked for."""
        for key in keys:
            if key not in self._keys:
                self._keys[key] = _Key(key, self._live.values())
            if key not in self._named:
                self._spare.pop(key, None)
                self._spare[key] = None

    def _trim(self) -> None:
        """Drop the least recently asked-for spare keys beyond the bound."""
        spare = self._spare
        while len(spare) > self._spare_max:
            key = next(iter(spare))
            del spare[key]
            del self._keys[key]

    def _matching(self, e: Expression) -> Set[str]:
        """Ids of the live containers for which the expression holds (never to be mutated);
        its key must be indexed."""
        op = e.operator
        if op is Operator.ALWAYS_TRUE:
            return self.all
        index = self._keys[e.key]
        by = index.by
        match op:
            case Operator.EQUALS:
                return by.get(e.values[0], _NONE)
            case Operator.NOT_EQUAL:
                return self.all - by.get(e.values[0], _NONE)
            case Operator.EXISTS:
                return index.has
            case Operator.NOT_EXIST:
                return self.all - index.has
        if op in (Operator.IN, Operator.NOT_IN):
            hits = set().union(*(by.get(v, _NONE) for v in e.values))
        else:
            glob = e.glob
            assert glob is not None
            if glob.everything:
                hits = set(index.has)
            else:
                hits = set().union(*(by.get(v, _NONE) for v in glob.exact))
                wild = glob.wild
                if wild is not None:
                    hits.update(*(ids for value, ids in by.items() if wild(value)))
        if op in (Operator.IN, Operator.MATCHES, Operator.MATCHES_ANY):
            return hits
        return self.all - hits

    def weights(self, req: Request) -> dict[str, int]:
        """`container_weights(req, live containers)`, from the index."""
        if not req.affinities:
            return {}
        self._index(_named(req))
        sums: dict[str, int] = {}
        get = sums.get
        for a in req.affinities:
            if not isinstance(a, Affinity):
                continue
            scope, match = self._matching(a.scope), self._matching(a.match)
            hits = scope & match if len(scope) <= len(match) else match & scope
            weight = a.weight
            for cid in hits:
                sums[cid] = get(cid, 0) + weight
        sums.pop(req.container_id, None)
        self._trim()
        return {
            cid: max(-MAX_WEIGHT, min(MAX_WEIGHT, total)) for cid, total in sums.items() if total
        }
