"""Fuzzing of every decoder the runtime's bytes go through: random, truncated, mutated, oversized.

Run: ``.venv/bin/python benchmarks/fuzz.py [--inputs 100000] [--seed 1]``

Targets, each given an equal share of the inputs:

* ``ttrpc-frames`` - `FrameDecoder.feed` with the input split into random chunks;
* ``ttrpc-envelopes`` - `decode_request` and `decode_response`;
* ``mux-frames`` - `MuxDecoder.feed` with random chunks;
* ``nri-payloads`` - the payload of every Plugin method the stub serves (half of them well-formed
  protobuf with odd values: see `twist`), sent by the runtime-side
  test peer through the real unix socket, mux and ttrpc server into the stub, which decodes it and
  calls our policy-backed plugin (a fresh one every 2000 inputs, so the state stays bounded);
* ``annotations`` - CreateContainer (then RemoveContainer) of pods whose annotations are hostile
  contents (`annotation_value`: nesting, anchors and aliases, huge and tiny numbers, unicode, long
  strings, the cases of `nri_topology.testing.hostile`) under every key the policy reads and
  misspelled ones, through the same socket into the real policy; each must be answered within the
  runtime's 2 s request timeout.

Inputs are seeded: valid encodings mutated (bit flips, overwritten, inserted, deleted and
duplicated bytes, several at once), truncated, random bytes, and oversized frames (announced
lengths beyond the limits, and real payloads beyond them). A crash is an exception other than the
decoder's documented error, a dropped connection or a call without an answer within 5 s (a hang);
statuses the stub answers with are counted by kind. There must be no crash.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structlog
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from benchmarks.workload import MACHINES, Spec, nri_pair
from nri_topology.daemon.plugin import TopologyPlugin
from nri_topology.nri import api_pb2
from nri_topology.nri.mux import HEADER, MAX_ACCEPTED_PAYLOAD, MuxDecoder, MuxProtocolError
from nri_topology.nri.mux import frame_message as mux_frame
from nri_topology.nri.stub import PLUGIN_SERVICE
from nri_topology.policy.intake.annotations import ALIAS_DOMAIN, ANNOTATIONS, DOMAIN, RESOURCES_KEY
from nri_topology.policy.options import Options
from nri_topology.policy.policy import Policy
from nri_topology.policy.types import QoS
from nri_topology.testing import hostile
from nri_topology.testing.harness import connected
from nri_topology.testing.runtime import RuntimePeer
from nri_topology.topology.model import Machine
from nri_topology.ttrpc import codec
from nri_topology.ttrpc.codec import MAX_DATA, Code, Frame, FrameDecoder, ProtocolError, TtrpcError

TARGETS = ("ttrpc-frames", "ttrpc-envelopes", "mux-frames", "nri-payloads", "annotations")
RUNTIME_TIMEOUT = 2.0  # the runtime's default request timeout
CALL_TIMEOUT = 5.0
PLUGIN_LIFETIME = 2000  # NRI inputs per plugin instance


@dataclass
class TargetReport:
    target: str
    inputs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    crashes: int = 0
    crash_examples: list[str] = field(default_factory=list)
    max_ms: float = 0.0

    def crash(self, what: str, data: bytes) -> None:
        self.crashes += 1
        if len(self.crash_examples) < 5:
            self.crash_examples.append(f"{what}; input {data[:64].hex()} ({len(data)} bytes)")

    def timed(self, started: float) -> None:
        self.max_ms = max(self.max_ms, (time.perf_counter() - started) * 1e3)

    def summary(self) -> dict[str, object]:
        return {
            "inputs": self.inputs,
            "outcomes": dict(self.outcomes),
            "crashes": self.crashes,
            "crash_examples": self.crash_examples,
            "max_ms_per_input": round(self.max_ms, 2),
        }


# --- inputs -------------------------------------------------------------------------------------


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to four random edits of `data`."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randrange(len(b) + 1)
        if op == 0 and b:  # flip a bit
            i = min(pos, len(b) - 1)
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:  # overwrite with an interesting byte
            b[min(pos, len(b) - 1)] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2:  # insert random bytes
            b[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:  # delete a range
            del b[pos : pos + rng.randint(1, 8)]
        elif op == 4 and b:  # duplicate a range
            end = min(len(b), pos + rng.randint(1, 16))
            b[pos:pos] = b[pos:end]
        else:  # truncate
            del b[pos:]
    return bytes(b)


def inputs(
    rng: random.Random, seeds: list[bytes], count: int, oversize: Callable[[random.Random], bytes]
) -> Iterator[bytes]:
    for _ in range(count):
        roll = rng.random()
        seed = rng.choice(seeds)
        if roll < 0.1:
            yield rng.randbytes(rng.choice((0, 1, 4, 8, 12, 17, 64, 300)))
        elif roll < 0.25:
            yield seed[: rng.randrange(len(seed) + 1)]
        elif roll < 0.99:
            yield mutate(rng, seed)
        else:
            yield oversize(rng)


def chunks(rng: random.Random, data: bytes) -> Iterator[bytes]:
    """`data` split at random points (never an empty chunk, which would mean EOF)."""
    pos = 0
    while pos < len(data):
        step = rng.choice((1, 3, 7, 64, 4096, len(data)))
        yield data[pos : pos + step]
        pos += step


# --- decoders -----------------------------------------------------------------------------------


def _ttrpc_seeds(rng: random.Random) -> list[bytes]:
    seeds = []
    for i in range(20):
        req = codec.encode_request(
            PLUGIN_SERVICE, "CreateContainer", rng.randbytes(i * 7), timeout_nano=i * 1000
        )
        resp = codec.encode_response(rng.randbytes(i), codec.Status(i % 17, "x" * i))
        for t, data in ((1, req), (2, resp), (3, b"")):
            seeds.append(codec.encode_frame(Frame(i, t, i % 3, data)))
    seeds.append(b"".join(seeds[:6]))
    return seeds


def _ttrpc_oversize(rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        header = struct.pack(">IIBB", rng.randint(MAX_DATA + 1, 2**32 - 1), 1, 1, 0)
        return header + rng.randbytes(64)
    length = MAX_DATA + rng.randint(1, 1024)
    return struct.pack(">IIBB", length, 3, 1, 0) + bytes(length) + _ttrpc_seeds(rng)[0]


def fuzz_frames(rng: random.Random, count: int) -> TargetReport:
    report = TargetReport("ttrpc-frames")
    for data in inputs(rng, _ttrpc_seeds(rng), count, _ttrpc_oversize):
        report.inputs += 1
        decoder = FrameDecoder()
        started = time.perf_counter()
        outcome = "accepted"
        try:
            for chunk in chunks(rng, data):
                decoder.feed(chunk)
                if decoder.buffered > codec.HEADER_SIZE + MAX_DATA + len(chunk):
                    report.crash(f"buffer grew to {decoder.buffered}", data)
        except ProtocolError:
            outcome = "refused"
        except Exception as exc:
            report.crash(f"{type(exc).__name__}: {exc}", data)
        report.timed(started)
        report.outcomes[outcome] += 1
    return report


def fuzz_envelopes(rng: random.Random, count: int) -> TargetReport:
    report = TargetReport("ttrpc-envelopes")
    seeds = []
    for i in range(20):
        seeds.append(codec.encode_request("svc", f"M{i}", rng.randbytes(i * 5), i, [("k", "v")]))
        seeds.append(codec.encode_response(rng.randbytes(i), codec.Status(i % 17, "m" * i)))
    big = bytes(MAX_DATA + 1)

    def oversize(r: random.Random) -> bytes:
        return codec.encode_request("svc", "Big", big) if r.random() < 0.5 else big

    for data in inputs(rng, seeds, count, oversize):
        report.inputs += 1
        started = time.perf_counter()
        for decode in (codec.decode_request, codec.decode_response):
            try:
                decode(data)
                report.outcomes["accepted"] += 1
            except ProtocolError:
                report.outcomes["refused"] += 1
            except Exception as exc:
                report.crash(f"{decode.__name__}: {type(exc).__name__}: {exc}", data)
        report.timed(started)
    return report


def fuzz_mux(rng: random.Random, count: int) -> TargetReport:
    report = TargetReport("mux-frames")
    seeds = [b"".join(mux_frame(i % 3, rng.randbytes(i * 300))) for i in range(20)]

    def oversize(r: random.Random) -> bytes:
        return HEADER.pack(1, r.randint(MAX_ACCEPTED_PAYLOAD + 1, 2**32 - 1)) + r.randbytes(32)

    for data in inputs(rng, seeds, count, oversize):
        report.inputs += 1
        decoder = MuxDecoder()
        started = time.perf_counter()
        outcome = "accepted"
        try:
            for chunk in chunks(rng, data):
                decoder.feed(chunk)
        except MuxProtocolError:
            outcome = "refused"
        except Exception as exc:
            report.crash(f"{type(exc).__name__}: {exc}", data)
        report.timed(started)
        report.outcomes[outcome] += 1
    return report


# --- NRI payloads through the socket -------------------------------------------------------------


def _nri_seeds() -> list[tuple[str, Message]]:
    """A valid request for every Plugin method the stub serves."""
    specs = [
        Spec(QoS.GUARANTEED, cpu=2000, memory=1 << 28),
        Spec(QoS.BURSTABLE, cpu=300, cpu_limit=600, memory=1 << 27),
        Spec(QoS.BEST_EFFORT),
        Spec(QoS.GUARANTEED, cpu=1500, memory=1 << 28, memory_type="pmem"),
    ]
    pairs = [nri_pair(f"f{i}", s) for i, s in enumerate(specs)]
    pod, ctr = pairs[0]
    pod.annotations[f"cold-start.{DOMAIN}/pod"] = "duration: 0s"
    ctr.linux.resources.cpu.cpus = "0-3"
    ctr.linux.resources.cpu.mems = "0"
    msgs: list[tuple[str, Message]] = [
        ("Configure", api_pb2.ConfigureRequest(runtime_name="fuzz", request_timeout=2000)),
        (
            "Synchronize",
            api_pb2.SynchronizeRequest(
                pods=[p for p, _ in pairs], containers=[c for _, c in pairs]
            ),
        ),
        ("UpdatePodSandbox", api_pb2.UpdatePodSandboxRequest(pod=pod)),
        (
            "ValidateContainerAdjustment",
            api_pb2.ValidateContainerAdjustmentRequest(pod=pod, container=ctr),
        ),
        (
            "StateChange",
            api_pb2.StateChangeEvent(event=api_pb2.START_CONTAINER, pod=pod, container=ctr),
        ),
    ]
    for p, c in pairs:
        msgs.append(("CreateContainer", api_pb2.CreateContainerRequest(pod=p, container=c)))
        msgs.append(
            (
                "UpdateContainer",
                api_pb2.UpdateContainerRequest(
                    pod=p, container=c, linux_resources=c.linux.resources
                ),
            )
        )
        msgs.append(("StopContainer", api_pb2.StopContainerRequest(pod=p, container=c)))
        msgs.append(("RunPodSandbox", api_pb2.RunPodSandboxRequest(pod=p)))
        msgs.append(("StartContainer", api_pb2.StartContainerRequest(pod=p, container=c)))
        msgs.append(("RemoveContainer", api_pb2.RemoveContainerRequest(pod=p, container=c)))
    for method, cls in (
        ("StopPodSandbox", api_pb2.StopPodSandboxRequest),
        ("RemovePodSandbox", api_pb2.RemovePodSandboxRequest),
        ("PostUpdatePodSandbox", api_pb2.PostUpdatePodSandboxRequest),
    ):
        msgs.append((method, cls(pod=pod)))
    for method, cls in (
        ("PostCreateContainer", api_pb2.PostCreateContainerRequest),
        ("PostStartContainer", api_pb2.PostStartContainerRequest),
        ("PostUpdateContainer", api_pb2.PostUpdateContainerRequest),
    ):
        msgs.append((method, cls(pod=pod, container=ctr)))
    return msgs


_STRINGS = (
    "",
    "0-3",
    "3-0",
    "-1",
    "0-99999",
    "0,,1",
    "18446744073709551616",
    "\x00",
    "\u00e9" * 40,
    "dram,pmem",
    "duration: 5s",
    "{}",
    "[",
    "true",
    "besteffort",
    "/kubepods/burstable/x",
)
_INTS = (0, 1, -1, 2, 1023, 2**31 - 1, -(2**31), 2**32 - 1, 2**63 - 1, -(2**63))
_ANNOTATION_KEYS = (
    *(f"{spec.name}.{DOMAIN}/pod" for spec in ANNOTATIONS if not spec.prefixed),
    *(spec.key for spec in ANNOTATIONS if spec.prefixed),
    RESOURCES_KEY,
)


def _scalar(rng: random.Random, fd: FieldDescriptor) -> object:
    if fd.type == FieldDescriptor.TYPE_STRING:
        return rng.choice(_STRINGS)
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.randint(0, 16))
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice((0.0, -1.0, 1e300, float("nan")))
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return rng.randint(-1, 40)
    return rng.choice(_INTS)


def twist(rng: random.Random, msg: Message) -> None:
    """Valid protobuf, odd values: strings, numbers, enums and annotations the runtime would
    never send, so the input gets past decoding into the plugin and the policy."""
    for fd, value in msg.ListFields():
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            if fd.message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_STRING:
                value[rng.choice(_ANNOTATION_KEYS)] = rng.choice(_STRINGS)
        elif fd.is_repeated:
            if fd.message_type is not None:
                for item in value:
                    if rng.random() < 0.3:
                        twist(rng, item)
        elif fd.message_type is not None:
            if rng.random() < 0.7:
                twist(rng, value)
        elif rng.random() < 0.3:
            try:
                setattr(msg, fd.name, _scalar(rng, fd))
            except (ValueError, TypeError):
                setattr(msg, fd.name, 0 if fd.type != FieldDescriptor.TYPE_STRING else "")


def _classify(exc: TtrpcError) -> str:
    if exc.code == Code.INTERNAL and "cannot decode" in exc.message:
        return "not decodable"
    if exc.code == Code.UNKNOWN and exc.message.startswith("nri-topology:"):
        return "refused by the policy"
    if exc.code == Code.INVALID_ARGUMENT:
        return "invalid argument"
    return f"other status {exc.code}"


async def _nri_session(
    machine: Machine,
    batch: list[tuple[str, bytes]],
    report: TargetReport,
    timeout: float = CALL_TIMEOUT,
) -> None:
    plugin = TopologyPlugin(Policy(machine, Options()))
    async with connected(plugin, RuntimePeer(request_timeout=timeout)) as (peer, _):
        conn = await peer.wait_plugin()
        for method, data in batch:
            report.inputs += 1
            started = time.perf_counter()
            try:
                await conn.client.call(PLUGIN_SERVICE, method, data, timeout=timeout)
                report.outcomes["answered"] += 1
            except TtrpcError as exc:
                if exc.code == Code.DEADLINE_EXCEEDED or conn.client.closed:
                    report.crash(f"{method}: no answer or connection lost: {exc}", data)
                    return
                report.outcomes[_classify(exc)] += 1
            except Exception as exc:
                report.crash(f"{method}: {type(exc).__name__}: {exc}", data)
                return
            report.timed(started)
        await plugin.settle()


def fuzz_nri(rng: random.Random, count: int, machine: Machine) -> TargetReport:
    report = TargetReport("nri-payloads")
    messages: dict[str, list[Message]] = {}
    for method, msg in _nri_seeds():
        messages.setdefault(method, []).append(msg)
    encoded = {m: [msg.SerializeToString() for msg in msgs] for m, msgs in messages.items()}
    methods = sorted(messages)

    def oversize(r: random.Random) -> bytes:
        return encoded["Synchronize"][0] + bytes(MAX_DATA)

    batch: list[tuple[str, bytes]] = []
    for i in range(count):
        method = rng.choice(methods)
        if rng.random() < 0.5:  # well-formed protobuf with odd values
            msg = type(messages[method][0])()
            msg.CopyFrom(rng.choice(messages[method]))
            twist(rng, msg)
            data = msg.SerializeToString()
        else:
            data = next(inputs(rng, encoded[method], 1, oversize))
        batch.append((method, data))
        if len(batch) == PLUGIN_LIFETIME or i == count - 1:
            asyncio.run(_nri_session(machine, batch, report))
            batch = []
    return report


# --- annotation contents ------------------------------------------------------------------------

_ANNOTATION_KEYS_ALL = (
    *_ANNOTATION_KEYS,
    *(f"{spec.name}.{ALIAS_DOMAIN}/container.app" for spec in ANNOTATIONS if not spec.prefixed),
    f"require-isolated-cpu.{DOMAIN}",
    f"cpu-class.{DOMAIN}",
    f"prefer-cpu-priority.{DOMAIN}/pod",
)


def _number(rng: random.Random) -> str:
    return rng.choice(
        [
            "9" * rng.randint(1, 6000),
            f"0.{'0' * rng.randint(1, 400)}1",
            f"1e{rng.randint(-999, 999)}",
            "0x" + "f" * rng.randint(1, 60),
            str(rng.randint(-(2**70), 2**70)),
            rng.choice(["0", "-0", ".inf", "-.nan", "1_000", "1:2:3"]),
        ]
    )


def _scalar_text(rng: random.Random) -> str:
    return rng.choice(
        [
            _number(rng),
            "x" * rng.choice([1, 64, 65, 16384, 16385, 300_000]),
            "".join(rng.choice("é€𝄞\u202e\x00\n\t:#&*!{}[]") for _ in range(rng.randint(0, 30))),
            rng.choice(["true", "false", "T", "dram,pmem", "mixed", "duration: 60s", "~", ""]),
        ]
    )


def _yaml(rng: random.Random, depth: int = 0) -> str:
    """A random YAML-ish value: flow collections, anchors, aliases, tags, scalars."""
    roll = rng.random()
    if depth > 4 or roll < 0.35:
        return json.dumps(_scalar_text(rng)) if rng.random() < 0.5 else _number(rng)
    if roll < 0.55:
        return "[" + ", ".join(_yaml(rng, depth + 1) for _ in range(rng.randint(0, 4))) + "]"
    if roll < 0.75:
        items = (f"{json.dumps(_scalar_text(rng)[:20])}: {_yaml(rng, depth + 1)}" for _ in range(3))
        return "{" + ", ".join(items) + "}"
    return rng.choice([f"&a {_yaml(rng, depth + 1)}", "*a", f"!!str {_yaml(rng, depth + 1)}"])


def annotation_value(rng: random.Random) -> str:
    """Hostile annotation contents: a grammar of YAML and JSON, and the cases of issue 10."""
    big = rng.randint(1, 40_000)
    return rng.choice(
        [
            lambda: _yaml(rng),
            lambda: _scalar_text(rng),
            lambda: hostile.nested_brackets(big),
            lambda: hostile.nested_cold_start(big),
            lambda: hostile.deep_json(big),
            lambda: hostile.anchored_rules(rng.randint(1, 1200), rng.randint(1, 250)),
            lambda: hostile.alias_bomb(rng.randint(1, 9), rng.randint(1, 9)),
            lambda: hostile.worst_affinity(
                rng.randint(1, 12), rng.randint(1, 20), rng.randint(0, 12)
            ),
            lambda: hostile.claim("app", _number(rng), _number(rng)),
            lambda: hostile.huge_raw_number(rng.randint(1, 6000)),
            lambda: f"duration: {_number(rng)}{rng.choice(['', 'h', 'ms', 'µs'])}",
            lambda: "app: " + _yaml(rng),
        ]
    )()


def _annotated_pair(rng: random.Random, i: int) -> tuple[api_pb2.PodSandbox, api_pb2.Container]:
    spec = rng.choice(
        [
            Spec(QoS.BURSTABLE, cpu=100),
            Spec(QoS.GUARANTEED, cpu=1000, memory=1 << 28),
            Spec(QoS.BEST_EFFORT),
        ]
    )
    pod, ctr = nri_pair(f"a{i}", spec)
    pod.namespace = rng.choice(["tenant", "kube-system"])
    for _ in range(rng.randint(1, 3)):
        pod.annotations[rng.choice(_ANNOTATION_KEYS_ALL)] = annotation_value(rng)
    return pod, ctr


def fuzz_annotations(rng: random.Random, count: int, machine: Machine) -> TargetReport:
    """CreateContainer of pods with hostile annotations (and RemoveContainer after each)."""
    report = TargetReport("annotations")
    batch: list[tuple[str, bytes]] = []
    for i in range(count // 2):
        pod, ctr = _annotated_pair(rng, i)
        batch.append(
            (
                "CreateContainer",
                api_pb2.CreateContainerRequest(pod=pod, container=ctr).SerializeToString(),
            )
        )
        batch.append(
            (
                "RemoveContainer",
                api_pb2.RemoveContainerRequest(pod=pod, container=ctr).SerializeToString(),
            )
        )
        if len(batch) >= PLUGIN_LIFETIME or i == count // 2 - 1:
            asyncio.run(_nri_session(machine, batch, report, timeout=RUNTIME_TIMEOUT))
            batch = []
    return report


def run(total: int, seed: int, machine: Machine) -> dict[str, dict[str, object]]:
    """Fuzz every target with `total` inputs in all; summaries by target."""
    rng = random.Random(seed)
    share = total // len(TARGETS)
    reports = [
        fuzz_frames(random.Random(rng.random()), share),
        fuzz_envelopes(random.Random(rng.random()), share),
        fuzz_mux(random.Random(rng.random()), share),
        fuzz_nri(random.Random(rng.random()), share, machine),
        fuzz_annotations(random.Random(rng.random()), total - 4 * share, machine),
    ]
    return {r.target: r.summary() for r in reports}


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Refusals are logged as warnings by design; the fuzz run only counts them."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
        structlog.configure(**saved)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--machine", default="server", choices=MACHINES)
    args = parser.parse_args()
    from benchmarks.workload import load_machine

    machine = load_machine(args.machine)
    start = time.perf_counter()
    with quiet():
        results = run(args.inputs, args.seed, machine)
    crashes = sum(int(r["crashes"]) for r in results.values())  # type: ignore[call-overload]
    print(
        json.dumps(
            {"targets": results, "crashes": crashes, "seconds": time.perf_counter() - start},
            indent=2,
        )
    )
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
