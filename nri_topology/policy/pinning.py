"""A node's pinning as the runtime holds it, and what updates make of it.

One model for every driver that plays the runtime: the test runtime (NRI messages through the
socket), the simulator (its picture of the node) and the invariant checks (the runtime view that
must agree with the policy). The rules are the Go runtime side's:

* The updates in the replies to one CreateContainer, UpdateContainer or StopContainer are merged
  first (`merge_updates`, the adaptation's result merging): one entry per container, in the
  order containers are first named, plugins in index order. The first update to set a field of
  a container owns it; a later one setting it again, even from the same plugin, fails the
  request, unless that update may fail (`ignore_failure`): then it is dropped whole. An update of
  the container being created fails the request too.
* Updates are then applied in order (`apply_updates`, containerd's): each sets the fields it
  carries and keeps the others; updates of containers the node does not hold are skipped.
  Synchronize replies and unsolicited UpdateContainers go straight to this step.
  `apply_replies` does both for one request.

A `Form` says how a driver holds updates and container state, so the rules are written once for
policy values and for NRI messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, is_
from typing import Any, Generic, TypeVar

from nri_topology.policy.types import Placement, Update

U = TypeVar("U")  # an update, as a driver holds it
C = TypeVar("C")  # what one update sets
S = TypeVar("S")  # a container's state, as a driver holds it


class Conflict(ValueError):
    """The updates of one request cannot be merged: the runtime fails the request."""


@dataclass(frozen=True, slots=True)
class Form(Generic[U, C, S]):
    """How one driver holds updates and container state.

    `over` puts what an update sets over a container's state: it returns the new state, or,
    when `in_place`, changes the state it is given (the driver's own, as the test runtime's
    containers are) and returns nothing. Functions implemented in C (attribute getters, message
    methods) keep applying hundreds of updates per reply cheap.
    """

    target: Callable[[U], str]  # the container an update is for
    change: Callable[[U], C]  # what it sets
    over: Callable[[S, C], S | None]
    in_place: bool
    fields: Callable[[U], Iterable[str]]  # the fields it sets, by name (whose ownership counts)
    may_fail: Callable[[U], bool]  # whether its failure is ignored (`ignore_failure`)
    combine: Callable[[U, U], U]  # the second update's fields over the first's, may_fail of both
    blank: Callable[[U], U]  # the update's container and may_fail, no field


def merged(current: Placement | None, change: Placement) -> Placement:
    """`change` over `current`: fields the change leaves at None keep their value; over an
    unknown `current`, the change. (Positional: the update schedule asks it of hundreds of
    containers per event.)"""
    if current is None:
        return change
    return Placement(
        change.cpus if change.cpus is not None else current.cpus,
        change.mems if change.mems is not None else current.mems,
        change.cpu_shares if change.cpu_shares is not None else current.cpu_shares,
    )


_NOTHING = Placement(cpus=None, mems=None)


def _placement_fields(update: Update) -> Iterable[str]:
    p = update.placement
    return [
        name
        for name, value in (("cpus", p.cpus), ("mems", p.mems), ("cpu_shares", p.cpu_shares))
        if value is not None
    ]


PLACEMENTS: Form[Update, Placement, Placement] = Form(
    target=attrgetter("container_id"),
    change=attrgetter("placement"),
    over=merged,
    in_place=False,
    fields=_placement_fields,
    may_fail=lambda update: False,  # the policy's updates do not say; the daemon decides
    combine=lambda first, second: Update(
        first.container_id, merged(first.placement, second.placement)
    ),
    blank=lambda update: Update(update.container_id, _NOTHING),
)
"""The policy's own values: `Update`s over `Placement`s."""


def merge_updates(
    replies: Iterable[tuple[str, Sequence[U]]],
    form: Form[U, Any, Any],
    creating: str | None = None,
) -> Sequence[U]:
    """The updates of one request's replies (plugin name and its updates, in plugin order),
    merged as the runtime merges them; raises `Conflict` when the runtime fails the request.

    `creating` names the container a CreateContainer request is for. A container named once
    keeps its update as it came: ownership can only clash where a container is named again.
    The result may be the given sequence itself.
    """
    return _merged(replies, form, creating)[1]


def _merged(
    replies: Iterable[tuple[str, Sequence[U]]], form: Form[U, Any, Any], creating: str | None
) -> tuple[list[str], Sequence[U]]:
    """`merge_updates`, with the container of every merged update."""
    replies = list(replies)
    if len(replies) == 1:  # one plugin, the common case: no container named twice, no merging
        updates = replies[0][1]
        targets = list(map(form.target, updates))
        if len(set(targets)) == len(targets) and (creating is None or creating not in targets):
            return targets, updates
    named = [(plugin, update) for plugin, updates in replies for update in updates]
    targets = list(map(form.target, (update for _, update in named)))
    entries: dict[str, U] = {}
    owners: dict[tuple[str, str], str] = {}
    for (plugin, update), cid in zip(named, targets, strict=True):
        if cid == creating:
            raise Conflict(f'plugin "{plugin}" asked update of "{cid}" during creation')
        prior = entries.get(cid)
        clash = _claim(owners, cid, plugin, form.fields(update))
        if clash is not None and not form.may_fail(update):
            raise Conflict(clash)
        taken = update if clash is None else form.blank(update)
        entries[cid] = taken if prior is None else form.combine(prior, taken)
    return list(entries), list(entries.values())


def _claim(
    owners: dict[tuple[str, str], str], cid: str, plugin: str, fields: Iterable[str]
) -> str | None:
    """Claim `fields` of `cid` for `plugin`, in order, as the runtime does (claims made before a
    clash stay); the clash, or None."""
    for name in fields:
        other = owners.get((cid, name))
        if other is not None:
            return f'plugins "{plugin}" and "{other}" both tried to set {name} of "{cid}"'
        owners[cid, name] = plugin
    return None


@dataclass(frozen=True, slots=True)
class Applied(Generic[U, S]):
    """The outcome of a list of updates, in the order they were given."""

    placements: dict[str, S]  # new state of every known container an update touched
    applied: tuple[U, ...]  # the updates applied, in order
    unknown: tuple[str, ...]  # containers named by updates the node does not hold (skipped)


def apply_updates(
    current: Mapping[str, S],
    updates: Sequence[U],
    form: Form[U, Any, S] = PLACEMENTS,  # type: ignore[assignment]
) -> Applied[U, S]:
    """Apply `updates` in order to the containers in `current`, as the runtime does: several
    updates of one container each set their fields, the later winning; updates of containers
    not in `current` are skipped and named in `unknown`."""
    return _applied(current, list(map(form.target, updates)), updates, form)


def apply_replies(
    current: Mapping[str, S],
    replies: Iterable[tuple[str, Sequence[U]]],
    form: Form[U, Any, S],
    creating: str | None = None,
) -> Applied[U, S]:
    """`merge_updates`, then `apply_updates` of the result: what the runtime does with the
    replies to one request. Nothing is applied when the merging fails."""
    targets, updates = _merged(replies, form, creating)
    return _applied(current, targets, updates, form)


def _applied(
    current: Mapping[str, S], targets: list[str], updates: Sequence[U], form: Form[U, Any, S]
) -> Applied[U, S]:
    over, in_place = form.over, form.in_place
    changes = map(form.change, updates)
    if len(set(targets)) == len(targets):
        olds = list(map(current.get, targets))
        if not any(map(is_, olds, repeat(None))):  # each container once, all known: no lookups
            news = list(map(over, olds, changes))
            placements = dict(zip(targets, olds if in_place else news, strict=True))
            return Applied(placements, tuple(updates), ())
    placements: dict[str, S] = {}
    unknown: list[str] = []
    for cid, change in zip(targets, changes, strict=True):
        old = placements.get(cid)
        if old is None:
            old = current.get(cid)
            if old is None:
                unknown.append(cid)
                continue
        new = over(old, change)
        placements[cid] = old if in_place else new  # type: ignore[assignment]
    known = tuple(u for cid, u in zip(targets, updates, strict=True) if cid in placements)
    return Applied(placements, known, tuple(unknown))
