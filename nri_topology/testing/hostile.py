"""Annotation values a hostile pod author writes, for the regression tests, the fuzzer and the
benchmarks: each case of issue 10 as a function of its size, so a test can keep them small and a
benchmark can take them at full size."""

from __future__ import annotations

import json

from nri_topology.policy.intake.annotations import DOMAIN, RESOURCES_KEY

AFFINITY = f"{DOMAIN}/affinity"
ANTI_AFFINITY = f"{DOMAIN}/anti-affinity"
COLD_START = f"cold-start.{DOMAIN}"


def nested_brackets(depth: int = 30_000, container: str = "app") -> str:
    """`app: [[[[…]]]]`: libyaml's composer recursed once per bracket on the C stack."""
    return f"{container}: " + "[" * depth + "]" * depth


def nested_cold_start(depth: int = 30_000) -> str:
    return "duration: " + "[" * depth + "]" * depth


def anchored_rules(rules: int = 1000, patterns: int = 200, container: str = "app") -> str:
    """One rule repeated through an alias: a few KB that expand to rules x patterns tests."""
    values = ", ".join(f"v{i}*" for i in range(patterns))
    rule = (
        f"&r {{scope: {{operator: AlwaysTrue}}, "
        f"match: {{key: name, operator: MatchesAny, values: [{values}]}}}}"
    )
    return f"{container}:\n  - {rule}\n" + "  - *r\n" * (rules - 1)


def alias_bomb(levels: int = 9, width: int = 9, container: str = "app") -> str:
    """Billion laughs: each level is `width` aliases of the one below (width**levels strings)."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for n in range(1, levels):
        lines.append(f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]")
    lines.append(f"{container}: [{{match: {{key: name, operator: In, values: *l{levels - 1}}}}}]")
    return "\n".join(lines)


def rules(count: int, values: int, container: str = "app") -> str:
    """`count` affinity rules of one `In` expression of `values` names each."""
    names = ", ".join(f"n{i}" for i in range(values))
    return (
        f"{container}:\n" + f"  - match: {{key: name, operator: In, values: [{names}]}}\n" * count
    )


def worst_affinity(
    rules: int = 8, values: int = 16, globs: int = 8, wildcards: int = 4, container: str = "app"
) -> str:
    """The most expensive affinity the limits allow: every rule's scope a glob of the longest
    pattern with the most wildcards (matched against every distinct label value, each wildcard
    rescanning it), every match a NotIn of `values` names (a set as large as the live
    containers), `globs` patterns in all."""
    segment = "a" * ((253 - wildcards) // wildcards)
    pattern = "*" + "*".join([segment] * wildcards)
    names = ", ".join(f"n{i}" for i in range(values))
    out = [f"{container}:"]
    for i in range(rules):
        scope = (
            f'{{key: labels/app, operator: MatchesNone, values: ["{pattern[:-1]}{i % 10}"]}}'
            if i < globs
            else f"{{key: labels/app, operator: NotIn, values: [{names}]}}"
        )
        out.append(f"  - scope: {scope}")
        out.append(f"    match: {{key: name, operator: NotIn, values: [{names}]}}")
        out.append(f"    weight: {i + 1}")
    return "\n".join(out) + "\n"


def claim(container: str, cpu: str, memory: str | None = None) -> str:
    """A `noderesource.dev/resources` value claiming `cpu` (and `memory`) for `container`."""
    requests = {"cpu": cpu} | ({"memory": memory} if memory else {})
    return json.dumps({"containers": {container: {"requests": requests, "limits": requests}}})


def huge_number(digits: int = 5000, container: str = "app") -> str:
    return json.dumps({"containers": {container: {"requests": {"cpu": "9" * digits}}}})


def huge_raw_number(digits: int = 5000, container: str = "app") -> str:
    entry = json.dumps({"containers": {container: {"requests": {"cpu": 0}}}})
    return entry.replace('"cpu": 0', f'"cpu": {"9" * digits}')


def deep_json(depth: int = 30_000) -> str:
    return '{"containers": ' + '{"a": ' * depth + "1" + "}" * depth + "}"


CASES: dict[str, dict[str, str]] = {
    "nested brackets (affinity)": {AFFINITY: nested_brackets()},
    "nested brackets (cold-start)": {COLD_START: nested_cold_start()},
    "anchored rules": {AFFINITY: anchored_rules()},
    "alias bomb": {AFFINITY: alias_bomb()},
    "huge number (string)": {RESOURCES_KEY: huge_number()},
    "huge number (JSON number)": {RESOURCES_KEY: huge_raw_number()},
    "deep JSON": {RESOURCES_KEY: deep_json()},
    "200 KB invalid value": {f"memory-type.{DOMAIN}": "x" * 200_000},
}
"""Pod annotations of each case that must be refused with a named error."""
