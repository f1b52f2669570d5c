"""CRI create+start latency on a real containerd, with and without the plugin (root only).

    .venv/bin/python benchmarks/e2e_latency.py [--pods 30] [--rounds 3] [--json out.json]

The two modes (no plugin connected; `nri-topology run` connected to the NRI socket) alternate
for `--rounds` rounds, so a busy machine weighs on both alike. Each round of a mode starts a fresh
containerd from tests/e2e (fetched as tests/e2e/prepare.sh does), runs one pod sandbox per sample
and times CreateContainer + StartContainer of a BestEffort container in it, as a kubelet calls
them; reported are the median and p90 in milliseconds. Every fifth pod is Guaranteed with one
CPU and is removed again at once, so the plugin also sends updates for the others.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nri_topology.cri import api_pb2 as cri
from tests.e2e import harness


def sample(run: harness.Run, pods: int) -> list[float]:
    assert run.cri is not None
    times = []
    for i in range(pods):
        if i % 5 == 4:
            run.remove_pod(run.run_pod(f"g{i}", "guaranteed", 1000, 256 << 20))
        pod = run.run_pod(f"p{i}", "besteffort", containers=0)
        started = time.perf_counter()
        cid = run.create_container(pod, "c0")
        run.cri.runtime("StartContainer", cri.StartContainerRequest(container_id=cid))
        times.append((time.perf_counter() - started) * 1000)
        pod.containers.append(harness.Container(cid, "c0"))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    tools = harness.prepare()
    results = {}
    with tempfile.TemporaryDirectory(prefix="nri-e2e-", dir="/tmp") as d:
        base = Path(d)
        image = harness.write_image(tools, base / "busybox.tar")
        samples: dict[str, list[float]] = {"without plugin": [], "with plugin": []}
        for _ in range(args.rounds):
            for mode, times in samples.items():
                with harness.running(tools, base, image) as run:
                    if mode == "with plugin":
                        run.start_plugin()
                    times += sample(run, args.pods)
        for mode, times in samples.items():
            times.sort()
            results[mode] = {
                "median_ms": round(statistics.median(times), 1),
                "p90_ms": round(times[int(0.9 * (len(times) - 1))], 1),
                "samples": len(times),
            }
            print(
                f"{mode:15} create+start median {results[mode]['median_ms']:6.1f} ms, "
                f"p90 {results[mode]['p90_ms']:6.1f} ms ({len(times)} pods)"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
