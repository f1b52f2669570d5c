"""Failing closed on a real runtime (docs/operations.md, "Failing closed"): with the runtime's NRI
default validator requiring nri-topology, a container is not created while the plugin is away
(refused as the kubelet would see it, and created on its retry once the plugin is back, placed by
it), and a pod that tolerates the missing plugin starts anyway.

Runs where the runtime's NRI has the default validator: CRI-O 1.36 and containerd 2.2 and later
(NRI v0.10+). containerd 1.7 and 2.1 have none (their default configuration has no
`default_validator`): the test skips there, saying so.
"""

from __future__ import annotations

import grpc
import pytest

from tests.e2e.harness import Run, Tools, default_validator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOLERATE = "tolerate-missing-plugins.nri.io"
# The runtime's validator requiring nri-topology, as docs/operations.md gives it.
VALIDATOR = {
    "containerd": f"""
[plugins.'io.containerd.nri.v1.nri'.default_validator]
  enable = true
  required_plugins = ["nri-topology"]
  tolerate_missing_plugins_annotation = "{TOLERATE}"
""",
    "crio": f"""
[crio.nri.default_validator]
nri_enable_default_validator = true
nri_validator_required_plugins = ["nri-topology"]
nri_validator_tolerate_missing_plugins_annotation = "{TOLERATE}"
""",
}


@pytest.fixture
def required(tools: Tools, make_run) -> Run:
    """A run whose runtime requires nri-topology for every container."""
    if not default_validator(tools):
        pytest.skip(
            f"{tools.runtime} {tools.version}: its NRI has no default validator to require a "
            "plugin with (containerd 2.2 and later, CRI-O 1.36 have it)"
        )
    return make_run(runtime_config=VALIDATOR[tools.kind])


def test_required_plugin_away_refuses_creation_then_places_on_retry(required: Run) -> None:
    run = required
    run.start_plugin()
    run.placed(run.run_pod("before", "burstable", 200).containers[0])

    run.stop_plugin()  # restarting, upgraded, crashed: the runtime has no nri-topology
    waiting = run.run_pod("during", "burstable", 200, containers=0)
    with pytest.raises(grpc.RpcError) as refused:
        run.add_container(waiting, "c0", 200)
    assert 'required plugin "nri-topology" not present' in refused.value.details()
    # the plugin's own pod, static pods
    run.run_pod("tolerant", "besteffort", annotations={TOLERATE: "true"})

    run.start_plugin()
    retried = run.add_container(waiting, "c0", 200)  # the kubelet's retry
    run.placed(retried)  # placed by the plugin at its creation
