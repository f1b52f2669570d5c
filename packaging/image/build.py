"""Build the nri-topology container image as an OCI archive, without a registry or an image
builder: Debian 12's Python 3.11 (from .deb packages, unpacked, no maintainer scripts) plus this
checkout's wheel and its pinned dependencies in a virtual environment at /opt/nri-topology/venv,
the same path as the host install.

    python3 packaging/image/build.py [--out nri-topology.oci.tar] [--name IMAGE]

Must run on Debian 12 (apt-get downloads the packages; the host's python3.11 builds the wheel
and byte-compiles everything for the image's identical Python). The archive is deterministic:
members sorted, owner root, every timestamp SOURCE_DATE_EPOCH (default: the last commit's time),
.pyc files checked by hash, so the same commit, package versions and wheel versions give the same
image digest. Load it with `ctr images import` / `podman load` / `skopeo copy oci-archive:...`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from nri_topology.testing.ociimage import digest, image_archive  # noqa: E402

NAME = "ghcr.io/nri-topology/nri-topology"
PYTHON = "python3.11"
VENV = "opt/nri-topology/venv"
# Python 3.11 and the libraries its standard-library modules and our wheels load. Left out:
# terminal (readline, curses), databases (sqlite, dbm), NIS, time zones and MIME tables.
PACKAGES = (
    "libc6",
    "libgcc-s1",
    "libstdc++6",  # grpcio's extension (the runtime's CRI, the kubelet's PodResources)
    "zlib1g",
    "libexpat1",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libssl3",
    "libuuid1",
    "libcrypt1",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "python3.11-minimal",
)
# Paths from the packages that a plugin never reads.
DROP = ("usr/share/doc/", "usr/share/man/", "usr/share/lintian/", "usr/share/locale/",
        "usr/share/bug/", "usr/share/gdb/", "etc/ssl/openssl.cnf.d")  # fmt: skip


def version() -> str:
    """The package version, from the one place it is written."""
    text = (REPO / "nri_topology" / "__init__.py").read_text()
    for line in text.splitlines():
        if line.startswith("__version__ = "):
            return line.split('"')[1]
    raise SystemExit("no __version__ in nri_topology/__init__.py")


def source_date_epoch() -> int:
    if "SOURCE_DATE_EPOCH" in os.environ:
        return int(os.environ["SOURCE_DATE_EPOCH"])
    out = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True
    )
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else 0


def run(*cmd: str, cwd: Path | None = None) -> str:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def download_debs(dest: Path) -> dict[str, str]:
    """The packages' .deb files in `dest`; returns package -> version."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        run("apt-get", "download", *PACKAGES, cwd=dest)
    except SystemExit:
        run("apt-get", "update", "-qq")  # a fresh machine may have no package lists yet
        run("apt-get", "download", *PACKAGES, cwd=dest)
    versions = {}
    for deb in dest.glob("*.deb"):
        package, ver = run(
            "dpkg-deb", "--show", "--showformat=${Package} ${Version}", str(deb)
        ).split()
        if package in PACKAGES:
            versions[package] = ver
    missing = set(PACKAGES) - versions.keys()
    if missing:
        raise SystemExit(f"not downloaded: {sorted(missing)}")
    return versions


def unpack_debs(debs: Path, root: Path, versions: dict[str, str]) -> None:
    for package, ver in sorted(versions.items()):
        deb = next(
            d
            for d in debs.glob(f"{package}_*.deb")
            if run("dpkg-deb", "--show", "--showformat=${Version}", str(d)) == ver
        )
        run("dpkg-deb", "-x", str(deb), str(root))


def install_python_packages(root: Path, work: Path, python_version: str) -> None:
    """This checkout's wheel and the pinned dependencies into the image's venv, byte-compiled."""
    wheels = work / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(REPO))
    site = root / VENV / "lib" / PYTHON / "site-packages"
    run(
        sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps",
        "--only-binary=:all:", "--require-hashes", "--target", str(site),
        "-r", str(REPO / "requirements/demo.lock"),
    )  # fmt: skip
    run(
        sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps",
        "--target", str(site), *map(str, wheels.glob("*.whl")),
    )  # fmt: skip
    # RECORD lists files as this install wrote them, direct_url.json the temporary wheel path:
    # neither is read at run time, and both would differ between builds.
    for name in ("RECORD", "direct_url.json"):
        for junk in site.glob(f"*.dist-info/{name}"):
            junk.unlink()
    bin_dir = root / VENV / "bin"
    if (site / "bin").exists():
        for f in (site / "bin").iterdir():
            f.unlink()
        (site / "bin").rmdir()
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python").symlink_to(f"/usr/bin/{PYTHON}")
    (bin_dir / "python3").symlink_to("python")
    (root / VENV / "pyvenv.cfg").write_text(
        "home = /usr/bin\ninclude-system-site-packages = false\n"
        f"version = {python_version}\n"
    )
    script = bin_dir / "nri-topology"
    script.write_text(
        f"#!/{VENV}/bin/python\nimport sys\nfrom nri_topology.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    # Deterministic byte code for the standard library and the venv (the image is read-only).
    for tree in (root / "usr/lib" / PYTHON, site):
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "-j", "0",
             "--invalidation-mode", "unchecked-hash", "-d", "/" + str(tree.relative_to(root)),
             str(tree)],
            check=False, capture_output=True,
        )  # fmt: skip


def layer_of(root: Path, mtime: int) -> bytes:
    """The root filesystem as one uncompressed layer tar, deterministic."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = sorted(p for p in root.rglob("*"))
        for path in paths:
            rel = path.relative_to(root).as_posix()
            if any((rel + "/").startswith(d) or rel.startswith(d) for d in DROP):
                continue
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = mtime
            info.pax_headers = {}
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def skeleton(root: Path) -> None:
    for d in ("etc", "tmp", "proc", "sys", "dev", "run", "var/run/nri", "var/lib/nri-topology",
              "etc/nri-topology", "host/sys"):  # fmt: skip
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/usr/sbin/nologin\n")
    (root / "etc/group").write_text("root:x:0:\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("nri-topology.oci.tar"))
    parser.add_argument("--name", default=f"{NAME}:{version()}", help="image reference")
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "image")
    args = parser.parse_args(argv)
    if sys.version_info[:2] != (3, 11):
        raise SystemExit("run with Python 3.11 (the image's Python)")
    started = time.monotonic()
    epoch = source_date_epoch()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = work / "root"
        versions = download_debs(args.cache / "debs")
        unpack_debs(args.cache / "debs", root, versions)
        skeleton(root)
        install_python_packages(root, work, versions["python3.11-minimal"].split("-")[0])
        layer = layer_of(root, epoch)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    archive = image_archive(
        args.name,
        [layer],
        entrypoint=[f"/{VENV}/bin/nri-topology"],
        cmd=["run"],
        env=[f"PATH=/{VENV}/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"],
        created=created,
        labels={
            "org.opencontainers.image.title": "nri-topology",
            "org.opencontainers.image.version": version(),
            "org.opencontainers.image.licenses": "Apache-2.0",
            "org.opencontainers.image.description": "NRI plugin placing containers on "
            "topologically aligned CPUs and memory",
        },
    )
    args.out.write_bytes(archive)
    print(
        json.dumps(
            {
                "image": args.name,
                "archive": str(args.out),
                "bytes": len(archive),
                "archive_digest": digest(archive),
                "layer_digest": digest(layer),
                "seconds": round(time.monotonic() - started, 1),
                "debian_packages": versions,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
