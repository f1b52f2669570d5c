"""The generated NRI and ttrpc messages speak the same wire format as containerd/nri v0.12.2.

Field numbers are checked against the upstream protocol reference in ../shared/docs when it is
beside the checkout, the byte examples of docs/protocol.md §4.7 are reproduced, and every
payload of the recorded runtime/plugin exchange decodes to exactly what the upstream Go types
decoded it to.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from nri_topology.nri import api_pb2
from nri_topology.ttrpc import request_pb2, status_pb2

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"
CAPTURES = SHARED / "nri-capture"

# (message, field name, number, type) — a sample spanning every area of the NRI API
# (docs/protocol.md §5).
T = FieldDescriptor
FIELDS = [
    (api_pb2.RegisterPluginRequest, "plugin_name", 1, T.TYPE_STRING),
    (api_pb2.RegisterPluginRequest, "NRI_version", 3, T.TYPE_STRING),
    (api_pb2.ConfigureRequest, "registration_timeout", 4, T.TYPE_INT64),
    (api_pb2.ConfigureRequest, "NRI_version", 6, T.TYPE_STRING),
    (api_pb2.ConfigureResponse, "events", 2, T.TYPE_INT32),
    (api_pb2.SynchronizeRequest, "more", 3, T.TYPE_BOOL),
    (api_pb2.SynchronizeResponse, "more", 2, T.TYPE_BOOL),
    (api_pb2.UpdatePodSandboxRequest, "linux_resources", 3, T.TYPE_MESSAGE),
    (api_pb2.CreateContainerResponse, "evict", 3, T.TYPE_MESSAGE),
    (api_pb2.UpdateContainerRequest, "linux_resources", 3, T.TYPE_MESSAGE),
    (api_pb2.StateChangeEvent, "event", 1, T.TYPE_ENUM),
    (api_pb2.ValidateContainerAdjustmentRequest, "plugins", 6, T.TYPE_MESSAGE),
    (api_pb2.PodSandbox, "pid", 9, T.TYPE_UINT32),
    (api_pb2.PodSandbox, "ips", 10, T.TYPE_STRING),
    (api_pb2.LinuxPodSandbox, "resources", 6, T.TYPE_MESSAGE),
    (api_pb2.Container, "pid", 12, T.TYPE_UINT32),
    (api_pb2.Container, "exit_code", 17, T.TYPE_INT32),
    (api_pb2.Container, "CDI_devices", 20, T.TYPE_MESSAGE),
    (api_pb2.Container, "user", 21, T.TYPE_MESSAGE),
    (api_pb2.Container, "image", 22, T.TYPE_MESSAGE),
    (api_pb2.Image, "config_digest", 3, T.TYPE_STRING),
    (api_pb2.LinuxContainer, "seccomp_policy", 8, T.TYPE_MESSAGE),
    (api_pb2.LinuxContainer, "rdt", 12, T.TYPE_MESSAGE),
    (api_pb2.LinuxResources, "unified", 6, T.TYPE_MESSAGE),
    (api_pb2.LinuxResources, "pids", 8, T.TYPE_MESSAGE),
    (api_pb2.LinuxMemory, "use_hierarchy", 8, T.TYPE_MESSAGE),
    (api_pb2.LinuxCPU, "cpus", 6, T.TYPE_STRING),
    (api_pb2.LinuxCPU, "mems", 7, T.TYPE_STRING),
    (api_pb2.LinuxDevice, "file_mode", 5, T.TYPE_MESSAGE),
    (api_pb2.LinuxScheduler, "period", 7, T.TYPE_UINT64),
    (api_pb2.LinuxSeccompArg, "value_two", 3, T.TYPE_UINT64),
    (api_pb2.LinuxRdt, "remove", 4, T.TYPE_BOOL),
    (api_pb2.ContainerAdjustment, "annotations", 2, T.TYPE_MESSAGE),
    (api_pb2.ContainerAdjustment, "args", 9, T.TYPE_STRING),
    (api_pb2.LinuxContainerAdjustment, "rdt", 11, T.TYPE_MESSAGE),
    (api_pb2.LinuxContainerAdjustment, "memory_policy", 12, T.TYPE_MESSAGE),
    (api_pb2.ContainerUpdate, "ignore_failure", 3, T.TYPE_BOOL),
    (api_pb2.OptionalFileMode, "value", 1, T.TYPE_UINT32),
    (api_pb2.FieldOwners, "compound", 2, T.TYPE_MESSAGE),
    (request_pb2.Request, "timeout_nano", 4, T.TYPE_INT64),
    (request_pb2.Request, "metadata", 5, T.TYPE_MESSAGE),
    (request_pb2.Response, "status", 1, T.TYPE_MESSAGE),
    (request_pb2.Response, "payload", 2, T.TYPE_BYTES),
    (request_pb2.StringList, "list", 1, T.TYPE_STRING),
    (status_pb2.Status, "code", 1, T.TYPE_INT32),
    (status_pb2.Status, "details", 3, T.TYPE_MESSAGE),
]


@pytest.mark.parametrize(("message", "name", "number", "kind"), FIELDS)
def test_field_numbers_match_protocol_doc(
    message: type[Message], name: str, number: int, kind: int
) -> None:
    field = message.DESCRIPTOR.fields_by_name[name]
    assert (field.number, field.type) == (number, kind)


def test_configure_response_leaves_field_one_unused() -> None:
    assert sorted(api_pb2.ConfigureResponse.DESCRIPTOR.fields_by_number) == [2]


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        (api_pb2.Event, {"UNKNOWN": 0, "CREATE_CONTAINER": 4, "VALIDATE_CONTAINER_ADJUSTMENT": 14}),
        (api_pb2.Event, {"LAST": 15}),
        (api_pb2.ContainerState, {"CONTAINER_RUNNING": 3, "CONTAINER_STOPPED": 4}),
        (api_pb2.Field, {"None": 0, "CPUSetCPUs": 21, "CPUSetMems": 22, "MemoryPolicy": 40}),
        (api_pb2.MpolMode, {"MPOL_BIND": 2, "MPOL_WEIGHTED_INTERLEAVE": 6}),
        (api_pb2.LinuxSchedulerPolicy, {"SCHED_DEADLINE": 7}),
    ],
)
def test_enum_values_match_protocol_doc(enum: object, values: dict[str, int]) -> None:
    for name, number in values.items():
        assert enum.Value(name) == number  # type: ignore[attr-defined]


def test_services_and_methods_are_complete() -> None:
    services = api_pb2.DESCRIPTOR.services_by_name
    assert set(services) == {"Runtime", "Plugin", "HostFunctions"}
    assert services["Runtime"].full_name == "nri.pkg.api.v1alpha1.Runtime"
    assert set(services["Runtime"].methods_by_name) == {"RegisterPlugin", "UpdateContainers"}
    plugin = services["Plugin"].methods_by_name
    assert len(plugin) == 18
    assert plugin["StateChange"].input_type.name == "StateChangeEvent"
    assert plugin["StateChange"].output_type.name == "Empty"
    assert plugin["Shutdown"].input_type.name == "Empty"


# docs/protocol.md §4.7 byte examples: ttrpc data only (the mux and ttrpc headers are framing,
# tested elsewhere).
def test_register_plugin_request_bytes() -> None:
    payload = api_pb2.RegisterPluginRequest(plugin_name="logger", plugin_idx="10")
    request = request_pb2.Request(
        service="nri.pkg.api.v1alpha1.Runtime",
        method="RegisterPlugin",
        payload=payload.SerializeToString(),
    )
    expected = (
        b"\x0a\x1c" + b"nri.pkg.api.v1alpha1.Runtime" + b"\x12\x0e" + b"RegisterPlugin"
        b"\x1a\x0c\x0a\x06" + b"logger" + b"\x12\x02" + b"10"
    )
    assert request.SerializeToString() == expected
    assert len(expected) == 0x3C


def test_empty_success_response_is_zero_bytes() -> None:
    response = request_pb2.Response(payload=api_pb2.Empty().SerializeToString())
    assert response.SerializeToString() == b""


def test_configure_response_bytes() -> None:
    payload = api_pb2.ConfigureResponse(events=0x0408).SerializeToString()
    assert request_pb2.Response(payload=payload).SerializeToString() == bytes.fromhex("1203108808")


def test_unimplemented_error_bytes() -> None:
    response = request_pb2.Response(
        status=status_pb2.Status(code=12, message="method RunPodSandbox")
    )
    expected = bytes.fromhex("0a18080c1214") + b"method RunPodSandbox"
    assert response.SerializeToString() == expected
    assert len(expected) == 0x1A


def test_unknown_fields_are_tolerated_and_kept() -> None:
    # A newer runtime's Container with field 22 decoded by a type that lacks it is simulated by
    # appending fields 99 (varint) and 100 (length-delimited) to a known message.
    known = api_pb2.Container(id="c1", name="app").SerializeToString()
    extra = b"\x98\x06\x07" + b"\xa2\x06\x03abc"
    decoded = api_pb2.Container.FromString(known + extra)
    assert (decoded.id, decoded.name) == ("c1", "app")
    assert decoded.SerializeToString().endswith(extra)
    assert _unknown_fields(api_pb2.CreateContainerRequest(container=decoded)) == 2
    status = request_pb2.Response.FromString(b"\x0a\x02\x08\x05" + b"\x18\x01")
    assert status.status.code == 5


def test_truncated_message_is_a_decode_error() -> None:
    data = api_pb2.Container(id="container-id").SerializeToString()
    with pytest.raises(DecodeError):
        api_pb2.Container.FromString(data[:-3])


# --- recorded exchange -------------------------------------------------------------------------

PAYLOAD_NAME = re.compile(r"^\d{3}-[a-z-]+?-to-[a-z]+-(?P<method>\w+)-(?P<kind>request|response)$")


def _message_type(file_name: str) -> type[Message]:
    """Message class of a capture payload, from the method in its file name."""
    match = PAYLOAD_NAME.match(file_name.removesuffix(".payload.bin"))
    assert match, file_name
    method = match["method"]
    for service in ("Runtime", "Plugin"):
        methods = api_pb2.DESCRIPTOR.services_by_name[service].methods_by_name
        if method in methods:
            desc = methods[method]
            kind = desc.input_type if match["kind"] == "request" else desc.output_type
            return getattr(api_pb2, kind.name)
    raise AssertionError(f"no method {method} in the NRI services")


def _decoded_reference(directory: Path) -> dict[str, dict[str, object]]:
    """Upstream's own decoding of each payload (decoded.txt: header line, then proto3 JSON)."""
    sections = re.split(
        r"^== frames/(\S+)\s+\(\w+\)\n", (directory / "decoded.txt").read_text(), flags=re.M
    )
    return {sections[i]: json.loads(sections[i + 1]) for i in range(1, len(sections), 2)}


def _unknown_fields(message: Message) -> int:
    """Number of unknown fields anywhere in ``message`` (nested messages included)."""
    count = len(UnknownFieldSet(message))
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            items = value.values() if value_field.type == FieldDescriptor.TYPE_MESSAGE else []
        elif field.is_repeated:
            items = value
        else:
            items = [value]
        count += sum(_unknown_fields(item) for item in items)
    return count


PAYLOADS = sorted(CAPTURES.glob("*/frames/*.payload.bin"))


@pytest.mark.skipif(
    not CAPTURES.is_dir(),
    reason="recorded runtime traffic in ../shared/nri-capture is not beside this checkout",
)
def test_captures_are_present() -> None:
    assert len(PAYLOADS) >= 12, f"expected recorded payloads under {CAPTURES}"


@pytest.mark.parametrize("path", PAYLOADS, ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_recorded_payload_decodes_like_upstream(path: Path) -> None:
    message_type = _message_type(path.name)
    data = path.read_bytes()
    message = message_type.FromString(data)
    assert not _unknown_fields(message), "a field number is unknown to our schema"
    reencoded = message.SerializeToString()
    assert message_type.FromString(reencoded) == message
    assert len(reencoded) == len(data)
    reference = _decoded_reference(path.parents[1])[path.name]
    assert json_format.MessageToDict(message, preserving_proto_field_name=True) == reference


# --- every field the protocol document lists ---------------------------------------------------

DOC = SHARED / "docs" / "nri-protocol.md"


def _documented_fields() -> list[tuple[str, int, str]]:
    """(message, number, name) from §5 of the protocol doc: its tables and inline lists."""
    text = DOC.read_text()
    section = text[text.index("## 5. The NRI API") : text.index("## 6. Plugin lifecycle")]
    found: list[tuple[str, int, str]] = []
    # Inline form: **Mount**: `1 destination string`, `2 type string`, ...
    inline = re.compile(r"\*\*(\w+)\*\*(?: \([^)]*\))?: ((?:`\d+ \w+[^`]*`[, and]*)+)")
    for match in inline.finditer(section):
        found += [(match[1], int(n), name) for n, name in re.findall(r"`(\d+) (\w+)", match[2])]
    table_of: str | None = None  # message whose "| # | Name |" table is being read
    row_of: str | None = None  # message named in the first column of a multi-message table
    for line in section.splitlines():
        if heading := re.fullmatch(r"\*\*(\w+)\*\*\s*(\(.*\))?", line.strip()):
            table_of = heading[1]
        elif row := re.match(r"\| `(\w+)` \| (\d+) \| `(\w+)`", line):
            row_of = row[1]
            found.append((row[1], int(row[2]), row[3]))
        elif (row := re.match(r"\| \| (\d+) \| `(\w+)`", line)) and row_of:
            found.append((row_of, int(row[1]), row[2]))
        elif (row := re.match(r"\|\s*(\d+)\s*\|\s*`(\w+)`", line)) and table_of:
            found.append((table_of, int(row[1]), row[2]))
    return found


@pytest.mark.skipif(
    not DOC.is_file(),
    reason="the upstream protocol reference ../shared/docs is not beside this checkout",
)
def test_every_documented_field_has_its_number() -> None:
    documented = _documented_fields()
    assert len(documented) > 150, "the protocol doc's §5 layout changed; adjust the parser"
    messages = api_pb2.DESCRIPTOR.message_types_by_name
    wrong = [
        (message, number, name)
        for message, number, name in documented
        if message not in messages
        or getattr(messages[message].fields_by_number.get(number), "name", None) != name
    ]
    assert wrong == []
