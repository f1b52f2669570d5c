"""The checks of the VM end-to-end test on the Debian 12 guest (systemd 252, cgroup v2), run there.

systemd 252 writes every unit's cgroup properties back on `systemctl daemon-reload` and
daemon-reexec, where 257 (guest.py's `daemon_reload`) writes none on a reload: a shared
container's scope then gets its old `AllowedCPUs` back while the runtime's record of its re-pin
lags. These checks prove the plugin's read-back repairs that, with guest.py's Node and revert
round. The results go to a JSON file as guest.py's do.

usage: python guest_bookworm.py OUT.json   (the repository on PYTHONPATH, the plugin's venv)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.vm.guest import REPAIR_S, Node, recorder, revert_round, sh


def reapplied(node: Node, pod: str, command: str) -> str:
    """`systemctl COMMAND` right after a grant, the runtime's record lagging: systemd 252 must
    put a shared container back on the granted CPU, and the plugin must take it off again within
    REPAIR_S, counting the revert."""
    version = sh("systemctl", "--version").split()[1]
    r = revert_round(node, pod, lambda _: sh("systemctl", command))
    assert r["seen_on_cpu_after_s"] or r["drift_revert_rose"], (
        f"systemd {version} did not put a holder back on the CPU on {command}: {r}"
    )
    assert r["off_again"] and r["drift_revert_rose"] >= 1, f"the revert was not repaired: {r}"
    assert not r["seen_on_cpu_after_s"] or r["off_again_after_s"] <= REPAIR_S, r
    return f"systemd {version} re-applied AllowedCPUs on {command}, repaired: {json.dumps(r)}"


def main(out: Path) -> int:
    record = recorder(out)
    node = Node()
    record("daemon_reload_252", lambda: reapplied(node, "dr", "daemon-reload"))
    # what Debian's systemd package runs when it is upgraded on a node
    record("daemon_reexec_252", lambda: reapplied(node, "dx", "daemon-reexec"))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
