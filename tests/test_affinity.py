"""Affinity annotations: parsing (full and shorthand), expression matching, weights, colocation."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.policy.intake.affinity import (
    ALWAYS,
    Affinity,
    Expression,
    Operator,
    container_weights,
    parse,
    same_pod,
)
from nri_topology.policy.intake.request import build_request
from nri_topology.policy.options import AnnotationLimits, Options
from nri_topology.policy.types import ContainerInfo, CpuKind, PodInfo, PolicyError, QoS, Request
from nri_topology.topology.model import Cpu, Machine, MemoryTier, NumaNode

ONE = frozenset({0})
MACHINE = Machine(
    cpus={0: Cpu(0, 0, 0, 0, 0, 0, ONE, ONE, ONE)},
    nodes={0: NumaNode(0, ONE, 1 << 30, MemoryTier.DRAM, "cpu", {0: 10})},
)

AFF = "resource-policy.nri.io/affinity"
ANTI = "resource-policy.nri.io/anti-affinity"


def request(
    cid: str,
    name: str,
    pod_id: str = "p1",
    namespace: str = "ns",
    labels: dict[str, str] | None = None,
    pod_labels: dict[str, str] | None = None,
    qos: QoS = QoS.BURSTABLE,
    affinities: tuple[Affinity, ...] = (),
) -> Request:
    return Request(
        container_id=cid,
        pod_id=pod_id,
        name=name,
        pod_name=f"pod-{pod_id}",
        namespace=namespace,
        qos=qos,
        kind=CpuKind.SHARED,
        cpu_request=0,
        cpu_limit=None,
        memory_request=0,
        memory_limit=None,
        labels=labels or {},
        pod_labels=pod_labels or {},
        affinities=affinities,
    )


OTHER = request(
    "c9",
    "db",
    pod_id="p9",
    namespace="prod",
    labels={"tier": "data"},
    pod_labels={"app": "shop"},
    qos=QoS.GUARANTEED,
)


@pytest.mark.parametrize(
    ("expr", "result"),
    [
        (Expression("name", Operator.EQUALS, ("db",)), True),
        (Expression("name", Operator.EQUALS, ("web",)), False),
        (Expression("name", Operator.NOT_EQUAL, ("web",)), True),
        (Expression("namespace", Operator.IN, ("dev", "prod")), True),
        (Expression("namespace", Operator.NOT_IN, ("dev", "prod")), False),
        (Expression("qosclass", Operator.EQUALS, ("Guaranteed",)), True),
        (Expression("id", Operator.EQUALS, ("c9",)), True),
        (Expression("labels/tier", Operator.EXISTS), True),
        (Expression("labels/app", Operator.EXISTS), False),
        (Expression("labels/app", Operator.NOT_EXIST), True),
        (Expression("labels/app", Operator.NOT_EQUAL, ("x",)), True),
        (Expression("labels/app", Operator.NOT_IN, ("x",)), True),
        (Expression("pod/labels/app", Operator.EQUALS, ("shop",)), True),
        (Expression("pod/name", Operator.MATCHES, ("pod-*",)), True),
        (Expression("pod/id", Operator.EQUALS, ("p9",)), True),
        (Expression("pod/namespace", Operator.EQUALS, ("prod",)), True),
        (Expression("pod/qosclass", Operator.EQUALS, ("Guaranteed",)), True),
        (Expression("name", Operator.MATCHES_NOT, ("d?",)), False),
        (Expression("name", Operator.MATCHES_ANY, ("x*", "d*")), True),
        (Expression("name", Operator.MATCHES_NONE, ("x*", "d*")), False),
        (Expression("labels/none", Operator.MATCHES, ("*",)), False),
        (Expression("labels/none", Operator.MATCHES_NONE, ("*",)), True),
        (ALWAYS, True),
    ],
)
def test_expression(expr, result):
    assert expr.evaluate(OTHER) is result


def parse_for(text: str, container: str = "web", anti: bool = False) -> tuple[Affinity, ...]:
    return parse(
        text, container=container, pod_id="p1", anti=anti, annotation=AFF, who="ns/pod/web"
    )


def test_full_form():
    text = """
web:
  - scope: {key: namespace, operator: Equals, values: [prod]}
    match: {key: labels/tier, operator: In, values: [data, cache]}
    weight: 50
  - match: {key: name, operator: NotExists}
sidecar:
  - match: {operator: AlwaysTrue}
"""
    first, second = parse_for(text)
    assert first == Affinity(
        Expression("namespace", Operator.EQUALS, ("prod",)),
        Expression("labels/tier", Operator.IN, ("data", "cache")),
        50,
    )
    assert second == Affinity(same_pod("p1"), Expression("name", Operator.NOT_EXIST), 1)


def test_shorthand_is_symmetric():
    text = "web: [db, cache]\nlogger: [web]"
    by_web = parse_for(text, "web")
    assert {a.match.values[0] for a in by_web} == {"db", "cache", "logger"}
    assert all(a.scope == same_pod("p1") and a.weight == 1 for a in by_web)
    (by_db,) = parse_for(text, "db")
    assert by_db.match == Expression("name", Operator.EQUALS, ("web",))
    assert parse_for(text, "unrelated") == ()


def test_anti_affinity_weights():
    text = "web:\n  - match: {key: name, operator: Equals, values: [db]}\n    weight: 7\n  - db"
    weights = [a.weight for a in parse_for(text, anti=True)]
    assert weights == [-7, -1]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("web: [", "not valid YAML"),
        ("[web, db]", "expected a map of container name"),
        ("web: db", "web: expected a list"),
        (
            "web: [{match: {key: name, operator: Like, values: [x]}}]",
            "web[0].match.operator: 'Like'",
        ),
        ("web: [{match: {key: colour, operator: Exists}}]", "web[0].match.key: 'colour'"),
        ("web: [{match: {key: name, operator: Equals, values: [a, b]}}]", "exactly one value"),
        ("web: [{match: {key: name, operator: In, values: []}}]", "needs at least one value"),
        ("web: [{match: {key: name, operator: Exists, values: [a]}}]", "takes no values"),
        ("web: [{match: {key: name, operator: In, values: [[a]]}}]", "list of strings"),
        ("web: [{scope: {key: name, operator: Exists}}]", "match is required"),
        ("web: [{match: {operator: AlwaysTrue}, weight: 1001}]", "from -1000 to 1000"),
        ("web: [{match: {operator: AlwaysTrue}, weight: high}]", "weight: 'high'"),
        ("web: [{match: {operator: AlwaysTrue}, wieght: 3}]", "unknown field 'wieght'"),
        ("web: [{match: {operator: AlwaysTrue, valus: [a]}}]", "unknown field 'valus'"),
        ("web: [{match: [name]}]", "expected a mapping"),
        ("web: [3]", "expected a container name or a mapping"),
        # another container's broken entry fails every container of the pod the same way
        ("db: [{match: {key: name, operator: Like}}]", "db[0].match.operator"),
    ],
)
def test_invalid(text, fragment):
    with pytest.raises(PolicyError) as e:
        parse_for(text)
    assert str(e.value).startswith(f"ns/pod/web: annotation {AFF}: ")
    assert fragment in str(e.value)


def test_weights_sum_exclude_self_and_clamp():
    big = Affinity(ALWAYS, ALWAYS, 800)
    me = request(
        "c1",
        "web",
        affinities=(big, big, Affinity(ALWAYS, Expression("name", Operator.EQUALS, ("db",)), -5)),
    )
    others = [me, request("c2", "db"), request("c3", "cache")]
    assert container_weights(me, others) == {"c2": 1000, "c3": 1000}
    anti = request("c1", "web", affinities=(Affinity(ALWAYS, ALWAYS, -1000),) * 2)
    assert container_weights(anti, others) == {"c2": -1000, "c3": -1000}
    assert container_weights(request("c1", "web"), others) == {}


def _pod(annotations: dict[str, str], pod_id: str = "p1", namespace: str = "ns") -> PodInfo:
    return PodInfo(
        id=pod_id,
        name=f"pod-{pod_id}",
        namespace=namespace,
        annotations=annotations,
        cgroup_parent="kubepods-besteffort",
    )


def _build(pod: PodInfo, name: str, options: Options | None = None) -> Request:
    ctr = ContainerInfo(id=f"{pod.id}-{name}", pod_id=pod.id, name=name)
    return build_request(pod, ctr, options or Options(), machine=MACHINE)


def test_build_request_reads_affinities_and_matches_across_the_pod():
    pod = _pod({AFF: "web: [db]", ANTI: "web: [cache]"})
    web, db, cache = (_build(pod, n) for n in ("web", "db", "cache"))
    stranger = _build(_pod({}, pod_id="p2"), "db")
    assert container_weights(web, [db, cache, stranger]) == {"p1-db": 1, "p1-cache": -1}
    assert container_weights(db, [web, cache]) == {"p1-web": 1}  # made symmetric
    assert container_weights(cache, [web, db]) == {"p1-web": -1}


def test_alias_domain_affinity():
    pod = _pod({"cri-resource-manager.intel.com/affinity": "web: [db]"})
    web, db = _build(pod, "web"), _build(pod, "db")
    assert container_weights(web, [db]) == {"p1-db": 1}


def test_invalid_annotation_through_build_request_names_the_container():
    with pytest.raises(PolicyError, match=r"^ns/pod-p1/web: annotation .*/anti-affinity: "):
        _build(_pod({ANTI: "web: nope"}), "web")


def test_implicit_colocation_only_without_explicit_affinity():
    opts = Options(colocate_pods=True, colocate_namespaces=True)
    pod, same_ns, elsewhere = _pod({}), _pod({}, "p2"), _pod({}, "p3", namespace="other")
    a, b = _build(pod, "a", opts), _build(pod, "b", opts)
    c, d = _build(same_ns, "c", opts), _build(elsewhere, "d", opts)
    assert container_weights(a, [b, c, d]) == {"p1-b": 20, "p2-c": 10}
    explicit = _build(_pod({ANTI: "a: [b]"}), "a", opts)
    assert container_weights(explicit, [b, c, d]) == {"p1-b": -1}
    assert container_weights(_build(pod, "a"), [b, c, d]) == {}


_NAMES = st.sampled_from(["a", "b", "c", "d"])


@settings(max_examples=100)
@given(st.dictionaries(_NAMES, st.lists(_NAMES, max_size=3), max_size=4))
def test_shorthand_affinity_is_symmetric(shorthand):
    text = yaml.safe_dump(shorthand)
    pod = _pod({AFF: text})
    roomy = Options(annotation_limits=AnnotationLimits(max_affinity_rules=24))
    reqs = {n: _build(pod, n, roomy) for n in "abcd"}
    for x, rx in reqs.items():
        for y, ry in reqs.items():
            if x != y:
                wx = container_weights(rx, [ry]).get(ry.container_id, 0)
                wy = container_weights(ry, [rx]).get(rx.container_id, 0)
                assert wx == wy
                assert wx == shorthand.get(x, []).count(y) + shorthand.get(y, []).count(x)


# --- the index answers exactly what a walk over every container answers --------------------------

_VALUES = st.sampled_from(["web", "db", "w*", "*b", "[dw]*", "?eb", "prod", "p1", "x"])
_KEYS = st.sampled_from(
    ["name", "namespace", "qosclass", "id", "pod/name", "pod/id", "labels/tier", "pod/labels/app"]
)


@st.composite
def _expressions(draw):
    op = draw(st.sampled_from(list(Operator)))
    if op is Operator.ALWAYS_TRUE:
        return ALWAYS
    if op in (Operator.EXISTS, Operator.NOT_EXIST):
        values = ()
    elif op in (Operator.EQUALS, Operator.NOT_EQUAL, Operator.MATCHES, Operator.MATCHES_NOT):
        values = (draw(_VALUES),)
    else:
        values = tuple(draw(st.lists(_VALUES, min_size=1, max_size=3)))
    return Expression(draw(_KEYS), op, values)


@st.composite
def _containers(draw):
    out = []
    for i in range(draw(st.integers(1, 8))):
        labels = draw(st.dictionaries(st.just("tier"), _VALUES, max_size=1))
        pod_labels = draw(st.dictionaries(st.just("app"), _VALUES, max_size=1))
        out.append(
            request(
                f"c{i}",
                draw(st.sampled_from(["web", "db", "wab"])),
                pod_id=draw(st.sampled_from(["p1", "p2"])),
                namespace=draw(st.sampled_from(["prod", "dev"])),
                labels=labels,
                pod_labels=pod_labels,
                qos=draw(st.sampled_from(list(QoS))),
            )
        )
    return out


@settings(max_examples=300, deadline=None)
@given(
    _containers(),
    st.lists(
        st.builds(Affinity, _expressions(), _expressions(), st.integers(-1000, 1000)), max_size=4
    ),
    st.data(),
)
def test_index_agrees_with_the_walk(containers, affinities, data):
    from nri_topology.policy.intake.affinity import Index

    index = Index()
    for c in containers:
        index.add(c)
    gone = data.draw(st.sets(st.sampled_from([c.container_id for c in containers])))
    for cid in gone:
        index.remove(cid)
    live = [c for c in containers if c.container_id not in gone]
    req = replace(containers[0], affinities=tuple(affinities))
    assert index.weights(req) == container_weights(req, live)
    for c in live:
        index.remove(c.container_id)
    assert index.all == set() and index.weights(req) == {}


_RULES = st.lists(
    st.builds(Affinity, _expressions(), _expressions(), st.integers(-1000, 1000)), max_size=3
)


@st.composite
def _operations(draw):
    """Adds (also of a live id again, with other affinities) and removes in any order, each
    followed by a question: the index picks which keys it holds from the affinities of what is
    live and of what was asked."""
    pool = draw(_containers())
    ops = []
    for _ in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(["add", "add", "remove"]))
        change = replace(draw(st.sampled_from(pool)), affinities=tuple(draw(_RULES)))
        asked = replace(draw(st.sampled_from(pool)), affinities=tuple(draw(_RULES)))
        ops.append((kind, change, asked))
    return ops


@settings(max_examples=300, deadline=None)
@given(_operations(), st.integers(0, 3))
def test_index_agrees_with_the_walk_while_containers_come_and_go(ops, spare):
    from nri_topology.policy.intake.affinity import Index

    index = Index(spare)
    live: dict[str, Request] = {}
    for kind, change, asked in ops:
        if kind == "add":
            index.add(change)
            live[change.container_id] = change
        else:
            index.remove(change.container_id)
            live.pop(change.container_id, None)
        assert index.weights(asked) == container_weights(asked, list(live.values()))
        assert len(index._spare) <= spare  # the keys no live container's affinities test
    assert set(index.all) == set(live)


@pytest.mark.parametrize("spare", [0, 16])
def test_index_keeps_its_keys_in_step_with_the_live_containers(spare):
    from nri_topology.policy.intake.affinity import Index

    rule = Affinity(
        Expression("name", Operator.EXISTS), Expression("name", Operator.IN, ("web", "db")), 5
    )
    web, db = request("a", "web"), request("b", "db", affinities=(rule,))
    asker = request("q", "x", affinities=(rule,))
    index = Index(spare)
    index.add(web)
    index.add(db)
    assert index.weights(asker) == {"a": 5, "b": 5}
    index.remove("a")  # under a key kept: db's affinities test it
    assert index.weights(asker) == {"b": 5}
    index.remove("b")  # no live container's affinities test the key any more
    index.add(web)
    assert index.weights(asker) == {"a": 5}
    index.remove("a")
    assert index.weights(asker) == {}
