"""OCI image archives written directly: no registry, no image builder (the e2e tests' busybox
image, and packaging/image/build.py's product image).

An image is an OCI image layout packed in one tar (what `ctr images import` reads): the layout
marker, an index naming the image, and content-addressed blobs for the manifest, the config and
uncompressed tar layers. Everything is written with fixed timestamps and owners, so the same
inputs give the same digests.

    python -m nri_topology.testing.ociimage --name e2e.local/busybox:1 OUT.tar
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import platform
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

EPOCH = "1970-01-01T00:00:00Z"
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a directory, a file (data) or a symlink (target)."""

    path: str
    data: bytes | None = None
    target: str | None = None
    mode: int = 0o755


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _member(tar: tarfile.TarFile, entry: Entry) -> None:
    info = tarfile.TarInfo(entry.path.strip("/"))
    info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = (
        entry.mode,
        0,
        0,
        0,
        "root",
        "root",
    )
    if entry.target is not None:
        info.type, info.linkname = tarfile.SYMTYPE, entry.target
        tar.addfile(info)
    elif entry.data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(entry.data)
        tar.addfile(info, io.BytesIO(entry.data))


def layer(entries: Iterable[Entry]) -> bytes:
    """An uncompressed layer tar, members in path order so the digest depends only on content."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(entries, key=lambda e: e.path):
            _member(tar, entry)
    return buf.getvalue()


def busybox_entries(busybox: Path) -> list[Entry]:
    """A root filesystem of one static busybox and a symlink per applet it lists."""
    applets = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    entries = [Entry(d) for d in ("bin", "dev", "etc", "proc", "sys", "root", "var", "run")]
    entries.append(Entry("tmp", mode=0o1777))
    entries.append(Entry("bin/busybox", data=busybox.read_bytes()))
    entries += [Entry(f"bin/{a}", target="busybox", mode=0o777) for a in set(applets) - {"busybox"}]
    entries.append(Entry("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\n", mode=0o644))
    entries.append(Entry("etc/group", data=b"root:x:0:\n", mode=0o644))
    return entries


def image_archive(
    name: str,
    layers: list[bytes],
    *,
    cmd: list[str] | None = None,
    entrypoint: list[str] | None = None,
    env: list[str] | None = None,
    created: str = EPOCH,
    labels: dict[str, str] | None = None,
) -> bytes:
    """An OCI layout tar holding one image tagged `name` (io.containerd.image.name)."""
    run_config: dict[str, object] = {
        "Env": env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "WorkingDir": "/",
    }
    if cmd:
        run_config["Cmd"] = cmd
    if entrypoint:
        run_config["Entrypoint"] = entrypoint
    if labels:
        run_config["Labels"] = labels
    config = _json(
        {
            "architecture": ARCH,
            "os": "linux",
            "created": created,
            "config": run_config,
            "rootfs": {"type": "layers", "diff_ids": [digest(data) for data in layers]},
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar", d) for d in layers],
        }
    )
    reference = name.rpartition("/")[2]
    tag = reference.rpartition(":")[2] if ":" in reference else "latest"
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    **_descriptor("application/vnd.oci.image.manifest.v1+json", manifest),
                    "platform": {"architecture": ARCH, "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        }
    )
    members = [Entry("blobs"), Entry("blobs/sha256")]
    members += [Entry("oci-layout", data=_json({"imageLayoutVersion": "1.0.0"}), mode=0o644)]
    members += [Entry("index.json", data=index, mode=0o644)]
    members += [
        Entry(f"blobs/sha256/{digest(data)[7:]}", data=data, mode=0o644)
        for data in dict.fromkeys([*layers, config, manifest])
    ]
    return layer(members)


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, data: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": digest(data), "size": len(data)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busybox", type=Path, default=Path("/bin/busybox"))
    parser.add_argument("--name", required=True, help="image reference, e.g. e2e.local/busybox:1")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    data = image_archive(args.name, [layer(busybox_entries(args.busybox))], cmd=["/bin/sh"])
    args.out.write_bytes(data)
    print(f"{args.out}: {args.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
