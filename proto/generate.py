"""Regenerate the committed protobuf modules from the .proto sources in this folder.

Usage: ``.venv/bin/python proto/generate.py`` rewrites the modules in the package;
``--check`` only compares and exits 1 when a committed module is stale, so CI and the
test suite catch a .proto edit that was not followed by a regeneration.

protoc names generated imports after the .proto path (``from google.rpc import
status_pb2``); the modules live inside ``nri_topology`` instead, so those imports are
rewritten to package imports here.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
REPO_ROOT = PROTO_ROOT.parent


@dataclass(frozen=True)
class Target:
    """One .proto source and the package module its generated code becomes."""

    source: str  # relative to PROTO_ROOT
    module: str  # dotted module path of the generated *_pb2 module


TARGETS = (
    Target("nri/pkg/api/v1alpha1/api.proto", "nri_topology.nri.api_pb2"),
    Target("google/rpc/status.proto", "nri_topology.ttrpc.status_pb2"),
    Target("ttrpc/request.proto", "nri_topology.ttrpc.request_pb2"),
    Target("podresources/api.proto", "nri_topology.kubelet.podresources_pb2"),
    # The CRI subset the plugin re-pins containers through, and the end-to-end tests speak.
    Target("cri/api.proto", "nri_topology.cri.api_pb2"),
)


def _protoc_module(source: str) -> str:
    """The module name protoc itself would give the generated code of ``source``."""
    return source.removesuffix(".proto").replace("/", ".") + "_pb2"


def _rewrite_imports(text: str) -> str:
    """Point imports of our other generated modules at their place in the package."""
    for target in TARGETS:
        parent, _, name = _protoc_module(target.source).rpartition(".")
        new_parent, _, new_name = target.module.rpartition(".")
        old, new = f"from {parent} import {name} ", f"from {new_parent} import {new_name} "
        text = text.replace(old, new)
    return text


def generate() -> dict[Path, bytes]:
    """Run protoc on every target; return file contents keyed by path relative to the repo."""
    include = resources.files("grpc_tools") / "_proto"
    out: dict[Path, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *(str(PROTO_ROOT / t.source) for t in TARGETS),
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise SystemExit(f"protoc failed:\n{result.stderr}")
        for target in TARGETS:
            produced = Path(tmp) / target.source.removesuffix(".proto")
            dest = Path(*target.module.split("."))
            for suffix in ("_pb2.py", "_pb2.pyi"):
                text = produced.with_name(produced.name + suffix).read_text()
                out[dest.with_name(dest.name.removesuffix("_pb2") + suffix)] = _rewrite_imports(
                    text
                ).encode()
    return out


def stale_files(generated: dict[Path, bytes]) -> list[Path]:
    """Paths whose committed bytes differ from freshly generated ones."""
    stale = []
    for rel, data in sorted(generated.items()):
        path = REPO_ROOT / rel
        if not path.exists() or path.read_bytes() != data:
            stale.append(rel)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only report stale modules (exit 1), write nothing"
    )
    args = parser.parse_args(argv)
    generated = generate()
    stale = stale_files(generated)
    if args.check:
        for rel in stale:
            print(f"stale: {rel} (run: python proto/generate.py)", file=sys.stderr)
        return 1 if stale else 0
    for rel in stale:
        (REPO_ROOT / rel).write_bytes(generated[rel])
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
