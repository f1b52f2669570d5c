"""The committed *_pb2 modules are exactly what proto/generate.py produces from the sources."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "proto" / "generate.py"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("proto_generate", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated() -> dict[Path, bytes]:
    return _load_generator().generate()


def test_committed_modules_are_fresh(generated: dict[Path, bytes]) -> None:
    assert _load_generator().stale_files(generated) == [], "run: python proto/generate.py"


def test_generated_imports_stay_inside_the_package(generated: dict[Path, bytes]) -> None:
    request = generated[Path("nri_topology/ttrpc/request_pb2.py")].decode()
    assert "from nri_topology.ttrpc import status_pb2 " in request
    assert "from google.rpc import" not in request


def test_check_reports_a_stale_module(
    tmp_path: Path, generated: dict[Path, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    generator = _load_generator()
    for rel, data in generated.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    stale = Path("nri_topology/nri/api_pb2.py")
    (tmp_path / stale).write_bytes(generated[stale] + b"\n")
    monkeypatch.setattr(generator, "REPO_ROOT", tmp_path)
    assert generator.stale_files(generated) == [stale]


def test_check_mode_exit_status(tmp_path: Path) -> None:
    # Run the command as documented on a copy of the repo whose status module is missing.
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "proto", copy / "proto", ignore=shutil.ignore_patterns("__pycache__"))
    for module in REPO.glob("nri_topology/*/*_pb2.py*"):
        rel = module.relative_to(REPO)
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(module, copy / rel)
    (copy / "nri_topology" / "ttrpc" / "status_pb2.py").unlink()
    cmd = [sys.executable, str(copy / "proto" / "generate.py"), "--check"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "stale: nri_topology/ttrpc/status_pb2.py" in result.stderr
    fix = subprocess.run(cmd[:-1], capture_output=True, text=True, check=False)
    assert fix.returncode == 0
    assert subprocess.run(cmd, check=False).returncode == 0
