"""How updates of other containers travel apart from a reply, chosen at Configure.

The runtime's CRI (UpdateContainerResources, cpusets only, as the kubelet's CPU manager re-pins;
the runtime relays each to us as an UpdateContainer, which we answer with the container's
current cpusets), else NRI UpdateContainers where the runtime's NRI serves them apart from its
events (v0.12.1 and later), else none: updates then wait for the next reply that can carry them
(`riders`), because an UpdateContainers could deadlock an older NRI adaptation. Failures are
logged and counted, never raised: every update ignores failure, and the cgroups tell what
landed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from nri_topology.cri.runtimes import CriError, default_socket
from nri_topology.daemon import convert
from nri_topology.daemon.metrics import Metrics
from nri_topology.nri import api_pb2
from nri_topology.nri.stub import NotConnectedError, Stub, StubError, Updates
from nri_topology.nri.versions import runtime_serves_updates_apart
from nri_topology.policy.types import Placement, Update
from nri_topology.topology import cpuset

if TYPE_CHECKING:
    from nri_topology.cri.client import CriClient

_log = structlog.get_logger("nri_topology.daemon")

# A CRI that does not answer at Configure (a runtime starts the plugins it launches before its
# CRI serves) is asked again this often, this many times.
_CRI_ASK_EVERY_S = 2.0
_CRI_ASKS = 60


class Transport:
    """How updates travel apart from a reply; chosen at Configure."""

    CRI = "cri"  # UpdateContainerResources on the runtime's CRI socket
    NRI = "nri"  # NRI UpdateContainers
    REPLY = "reply"  # none safe: they wait for the next reply that can carry them


class Transports:
    """The chosen transport and its sending; the updates waiting for a reply to ride on."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        wanted: str = "auto",
        cri_socket: str | None = None,
        pace_old_runtimes: bool = False,
        paced_if_safe: bool = True,
        concurrency: int = 3,
    ) -> None:
        self.metrics = metrics
        self.wanted = wanted  # auto, cri or nri, as configured
        self.cri_socket = cri_socket
        self.pace_old_runtimes = pace_old_runtimes
        self.paced_if_safe = paced_if_safe  # pacing configured (not all in the reply)
        self.concurrency = concurrency  # CRI calls at once
        self.stub: Stub | None = None
        self.chosen = Transport.REPLY
        self.cri: CriClient | None = None  # made only to ask the CRI: it loads gRPC
        # Re-pins sent through the CRI whose answer is awaited, by container: the runtime relays
        # each to us as an UpdateContainer (`relayed`).
        self.awaiting: dict[str, int] = {}
        # Updates waiting for a reply, by container: kept as given, since building hundreds of
        # `Update`s anew for the reply that takes them cost more than the rest of its encoding.
        self.riding: dict[str, Update] = {}
        self._asking: asyncio.Task[None] | None = None

    @property
    def paced(self) -> bool:
        """Whether re-pins go after the reply (a safe transport, and pacing configured)."""
        return self.paced_if_safe and self.chosen != Transport.REPLY

    async def configure(
        self, req: api_pb2.ConfigureRequest, on_cri_later: Callable[[], Awaitable[None]]
    ) -> None:
        """Choose the transport for this runtime; where the CRI should serve but does not answer
        yet, ask it again for a while and call `on_cri_later` once it does."""
        runtime = f"{req.runtime_name} {req.runtime_version}"
        socket = self.cri_socket or default_socket(req.runtime_name)
        safe = runtime_serves_updates_apart(req)
        # Where the NRI serves UpdateContainers apart from its events, auto takes it: each
        # re-pin through the CRI costs the runtime two more relays to its plugins, which on a
        # busy node lengthens the new container's start more than a batch under the NRI lock.
        ask_cri = self.wanted == Transport.CRI or (self.wanted == "auto" and not safe)
        answered = ""
        if ask_cri and socket is not None:
            if self.cri is None or self.cri.socket != socket:
                if self.cri is not None:
                    await self.cri.close()
                from nri_topology.cri.client import CriClient

                self.cri = CriClient(socket)
            there = Path(socket).exists()
            if not there:
                _log.warning(
                    "the runtime's CRI does not answer: no socket there (updates.cri_socket)",
                    cri_socket=socket,
                )
            if self.wanted == Transport.CRI:
                answered = "(not asked)"
            elif there:
                try:
                    answered = await self.cri.version()
                except CriError as exc:
                    _log.warning(
                        "the runtime's CRI does not answer", cri_socket=socket, error=str(exc)
                    )
        if answered or self.wanted == Transport.CRI:
            chosen = Transport.CRI  # configured, with no socket known: cannot be (below)
        elif safe or (self.pace_old_runtimes and self.paced_if_safe):
            chosen = Transport.NRI
        else:
            chosen = Transport.REPLY
        if chosen == Transport.CRI and socket is None:
            _log.error(
                "updates.transport is cri, but the CRI socket of this runtime is not known: "
                "set updates.cri_socket; updates wait for replies meanwhile",
                runtime=runtime,
            )
            chosen = Transport.REPLY
        self.chosen = chosen
        self.metrics.transport(chosen)
        self.cancel()
        if self.wanted == "auto" and self.cri is not None and not answered and not safe:
            self._asking = asyncio.ensure_future(self._ask_cri_later(on_cri_later))
        if chosen == Transport.NRI and not safe:
            _log.warning(
                "the runtime's NRI adaptation may deadlock on UpdateContainers (older than "
                "v0.12.1) and its CRI does not answer: pacing re-pins through NRI all the same, "
                "as configured",
                runtime=runtime,
                nri_version=req.NRI_version or None,
            )
        elif chosen == Transport.REPLY:
            _log.warning(
                "no safe transport for updates apart from a reply (NRI older than v0.12.1, and "
                "no CRI socket answers): re-pins travel in the replies, other updates wait for "
                "the next one",
                runtime=runtime,
                nri_version=req.NRI_version or None,
                cri_socket=socket,
            )
        _log.info(
            "updates apart from a reply",
            transport=chosen,
            paced=self.paced,
            runtime=runtime,
            cri_socket=socket if chosen == Transport.CRI else None,
            cri=answered or None,
        )

    async def _ask_cri_later(self, on_answer: Callable[[], Awaitable[None]]) -> None:
        cri = self.cri
        for _ in range(_CRI_ASKS):
            await asyncio.sleep(_CRI_ASK_EVERY_S)
            if cri is not self.cri:
                return
            try:
                answered = await cri.version()
            except CriError:
                continue
            await on_answer()
            self.metrics.transport(Transport.CRI)
            _log.info(
                "the runtime's CRI answers now: updates apart from a reply go through it",
                cri=answered,
                cri_socket=cri.socket,
                paced=self.paced,
            )
            return

    def take_riders(self) -> dict[str, Update]:
        """The CRI answers now: the updates that waited for a reply go through it instead."""
        riding, self.riding = self.riding, {}
        self.chosen = Transport.CRI
        return riding

    def cancel(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            self._asking = None

    async def close(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            await asyncio.gather(self._asking, return_exceptions=True)
            self._asking = None
        if self.cri is not None:
            await self.cri.close()

    # --- sending -----------------------------------------------------------------------------

    def with_riders(self, updates: Iterable[Update], own: str) -> tuple[Update, ...]:
        """`updates` for a reply, after the updates waiting for one (none but with no safe
        transport); not the event's own container's, which its reply sets anew."""
        if not self.riding:
            return tuple(updates)
        riding, self.riding = self.riding, {}
        riding.pop(own, None)
        self.metrics.repins.labels("rode_reply").inc(len(riding))
        return (*riding.values(), *updates)

    def relayed(self, container_id: str) -> bool:
        """Whether an UpdateContainer for the container is our own CRI re-pin, relayed."""
        return container_id in self.awaiting

    async def send(self, updates: Sequence[Update], why: str) -> None:
        """Updates apart from any reply, through the transport; with none safe they wait for
        the next reply that can carry updates (`with_riders`)."""
        if not updates:
            return
        if self.chosen == Transport.REPLY:
            for u in updates:
                self.riding[u.container_id] = u
            self.metrics.repins.labels("held_for_reply").inc(len(updates))
            return
        if self.chosen == Transport.CRI:
            await self.through_cri({u.container_id: u.placement for u in updates}, why)
        elif self.stub is not None:
            await self.through_nri(convert.updates(updates, ignore_failure=True), why)

    async def batch(self, batch: Mapping[str, Placement]) -> bool:
        """One batch of re-pins: one UpdateContainers, or concurrent CRI calls. False when it
        may not have reached the runtime (no connection)."""
        if self.chosen == Transport.CRI:
            await self.through_cri(batch, "re-pin")
            return True
        updates = [convert.container_update(c, p, ignore_failure=True) for c, p in batch.items()]
        return await self.through_nri(updates, "re-pin")

    async def through_nri(self, updates: Updates, why: str) -> bool:
        """One UpdateContainers; False when it may not have reached the runtime (no connection:
        Synchronize on reconnect reports what each container holds and repairs the rest)."""
        try:
            if self.stub is None:
                raise NotConnectedError("no runtime connection")
            await self.stub.update_containers(updates)
        except NotConnectedError as exc:
            self.metrics.error("update_not_connected")
            _log.warning(
                "updates not delivered; reconnecting repairs them", why=why, error=str(exc)
            )
            return False
        except StubError as exc:
            self.metrics.error("update_failed")
            _log.warning("runtime refused updates", why=why, error=str(exc))
        return True

    async def through_cri(self, placements: Mapping[str, Placement], why: str) -> None:
        """One UpdateContainerResources per container, `concurrency` at once; failures are
        logged and counted (a container that exited meanwhile fails), not raised."""
        cri = self.cri
        assert cri is not None
        awaiting = self.awaiting
        sem = asyncio.Semaphore(self.concurrency)

        async def one(cid: str, p: Placement) -> None:
            cpus = cpuset.text(p.cpus) if p.cpus else ""
            mems = cpuset.text(p.mems) if p.mems else ""
            if not cpus and not mems:
                return
            async with sem:
                awaiting[cid] = awaiting.get(cid, 0) + 1
                try:
                    await cri.update_cpusets(cid, cpus, mems)
                except CriError as exc:
                    self.metrics.error("update_failed")
                    _log.info("CRI update failed", why=why, container_id=cid, error=str(exc))
                finally:
                    left = awaiting.pop(cid) - 1
                    if left:
                        awaiting[cid] = left

        await asyncio.gather(*(one(cid, p) for cid, p in placements.items()))
