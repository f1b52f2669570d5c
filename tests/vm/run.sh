#!/bin/sh
# In the VM guest, from the 9p share (/mnt/host: the repository, a wheelhouse with the project's
# wheel, the test image): install the plugin as docs/operations.md installs the systemd service,
# start containerd with the systemd cgroup driver, then run guest.py's checks.
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
systemctl daemon-reload && systemctl enable --now nri-topology
# The checks: guest.py's, or those of the script the host names in the share (a second guest's).
G=$(cat "$H/guest" 2>/dev/null || echo guest.py)
PYTHONPATH=$R /opt/nri-topology/venv/bin/python "$R/tests/vm/$G" "$H/result.json"
