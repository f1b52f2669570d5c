"""Our plugin under containerd/nri's Go adaptation (benchmarks/go_side.py at tiny sizes).

The upstream runtime side validates what plugins send (adjustments, updates of other
containers) and drops a plugin that fails or times out; the benchmark driver fails when ours
did not pin every exclusive probe. Needs the Go toolchain the benchmark downloads into
.cache/go-side; the suite never downloads it, so without it the test skips.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import go_side

pytestmark = pytest.mark.skipif(
    not go_side.toolchain_cached(),
    reason=f"no Go toolchain in {go_side.CACHE} (benchmarks/go_side.py downloads it once)",
)


def test_our_plugin_under_the_go_adaptation(tmp_path: Path) -> None:
    out = tmp_path / "go_side.json"
    argv = ["--rounds", "1", "--samples", "5", "--live", "60", "--out", str(out)]
    assert go_side.main(argv) == 0
    result = json.loads(out.read_text())
    rows = {(r["live"], r["probe"]): r for r in result["rows"]}
    assert set(rows) == {(60, probe) for probe in go_side.PROBES}
    # On a filled node an exclusive create re-pins shared containers: the adaptation took the
    # updates riding on our reply (it fails the call otherwise).
    assert rows[60, "guaranteed-2cpu"]["ours"]["updates"] > 0
    assert rows[60, "guaranteed-2cpu"]["noop"]["updates"] == 0
    restarts = {r["plugin"]: r for r in result["restarts"]}
    assert restarts["ours"]["moved"] == 0
