"""One image name everywhere: the build, the DaemonSet, the chart, the Containerfile, the docs."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def build_module():
    spec = importlib.util.spec_from_file_location("image_build", REPO / "packaging/image/build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_image_name() -> None:
    build = build_module()
    image = f"{build.NAME}:{build.version()}"
    docs = yaml.safe_load_all((REPO / "packaging/kubernetes/daemonset.yaml").read_text())
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == image
    values = yaml.safe_load((REPO / "packaging/helm/nri-topology/values.yaml").read_text())
    assert f"{values['image']['repository']}:{values['image']['tag']}" == image
    assert f"-t {image} " in (REPO / "packaging/Containerfile").read_text()
    assert f"`{image}`" in (REPO / "docs/operations.md").read_text()
    assert build.NAME in (REPO / ".github/workflows/release.yml").read_text()


def test_image_requirements_pin_every_runtime_dependency() -> None:
    """The image installs with --no-deps from the demo lock: it must hold the whole closure."""
    from importlib import metadata

    from packaging.requirements import Requirement

    from tests.test_locks import pins

    pinned = pins("demo")
    # Our own requirements from pyproject.toml, which the image is built from: the installed
    # metadata can be a stale build's (an egg-info left in the checkout by an earlier wheel).
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    want: set[str] = set()
    todo: list[str | list[str]] = [project["dependencies"]]
    while todo:
        item = todo.pop()
        for text in item if isinstance(item, list) else metadata.distribution(item).requires or []:
            req = Requirement(text)
            key = req.name.lower().replace("_", "-")
            if (req.marker and not req.marker.evaluate({"extra": ""})) or key in want:
                continue
            want.add(key)
            todo.append(req.name)
    assert want <= pinned.keys(), f"not in the image: {sorted(want - pinned.keys())}"
