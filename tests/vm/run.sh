#!/bin/sh
# In the VM guest, from the 9p share (/mnt/host: the repository, a wheelhouse with the project's
# wheel, the test image, and CRI-O's binaries when the host has them): install the plugin as
# docs/operations.md installs the systemd service, start containerd with the systemd cgroup
# driver, install (not start) CRI-O, then run guest.py's checks.
set -eux
H=/mnt/host
R=$H/repo
python3 -m venv /opt/nri-topology/venv
/opt/nri-topology/venv/bin/pip install --quiet --no-index --find-links "$H/wheels" \
    --require-hashes -r "$R/requirements/demo.lock"
/opt/nri-topology/venv/bin/pip install --quiet --no-index --no-deps "$H"/wheels/nri_topology-*.whl
install -m 0644 "$R/systemd/nri-topology.service" /etc/systemd/system/
install -m 0644 "$R/systemd/nri-topology.env" /etc/default/nri-topology
install -d /etc/nri-topology && install -m 0644 "$R/config/config.yaml" /etc/nri-topology/config.yaml
# The drift check should not wait for the default verification interval.
sed -i 's/^  interval_seconds: 10$/  interval_seconds: 1/' /etc/nri-topology/config.yaml
install -d /etc/containerd && install -m 0644 "$R/tests/vm/containerd.toml" /etc/containerd/config.toml
systemctl start containerd
ctr -n k8s.io images import --no-unpack "$H/busybox.tar"
# CRI-O (tests/vm/crio.conf, its systemd cgroup manager): started by the crio_systemd check once
# containerd is stopped, so that one runtime at a time owns the NRI socket.
if [ -x "$H/crio/crio" ]; then
    install -m 0755 "$H/crio/crio" "$H/crio/pinns" /usr/local/bin/
    install -d /etc/crio/crio.conf.d /etc/cni/net.d
    install -m 0644 "$R/tests/vm/crio.conf" /etc/crio/crio.conf
    install -m 0644 "$H/crio/policy.json" /etc/crio/policy.json
    install -m 0644 "$H/crio/10-loopback.conflist" /etc/cni/net.d/
    install -m 0644 "$R/tests/vm/crio.service" /etc/systemd/system/
fi
systemctl daemon-reload && systemctl enable --now nri-topology
# The checks: guest.py's, or those of the script the host names in the share (a second guest's).
G=$(cat "$H/guest" 2>/dev/null || echo guest.py)
PYTHONPATH=$R /opt/nri-topology/venv/bin/python "$R/tests/vm/$G" "$H/result.json"
