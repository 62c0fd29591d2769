#!/usr/bin/python3
"""Plays rendered psync Kubernetes manifests as podman containers.

podman 4.3 cannot play a StatefulSet, a Job or a Service, and no Kubernetes
API server runs here, so this does, for exactly the kinds psync's manifests
use, what the control plane and a kubelet would:

  * StatefulSet: one container per replica, named and with the hostname
    NAME-ORDINAL, reachable on the network as NAME-ORDINAL.SERVICE (the
    headless Service's DNS name), one host folder per volumeClaimTemplate;
    restarted whenever it exits (restartPolicy Always).
  * Indexed Job: a container per completion index with
    JOB_COMPLETION_INDEX set, at most `parallelism` at a time, the lowest
    pending indexes first (an index is pending until a pod of it exits 0);
    a pod that fails makes its index pending again (restartPolicy Never), up
    to backoffLimit failures; podFailurePolicy FailJob exit codes fail the
    job at once. The job is complete when every index exited 0. Its
    parallelism can change while it runs (--event ... parallelism=N, as
    `kubectl patch` would): more starts pending indexes, fewer sends SIGTERM
    to the excess pods, the highest indexes first (Kubernetes' controller
    picks by readiness and age instead), SIGKILL after their
    terminationGracePeriodSeconds; a pod stopped so that exits 0 completes
    its index, as Kubernetes counts it.
  * ConfigMap and Secret: their data as read-only files (a Secret's with its
    defaultMode, owned by the pod's fsGroup); PersistentVolumeClaim: a host
    folder; emptyDir: a tmpfs.
  * Pod and container securityContext: runAsUser/runAsGroup, fsGroup (the
    folders are given to it), readOnlyRootFilesystem, capabilities drop ALL,
    allowPrivilegeEscalation false (no-new-privileges); seccomp
    RuntimeDefault is podman's default profile.
  * Service: the DNS aliases above, on an --internal podman network.

  * The Service is checked, not run: a StatefulSet's serviceName must name
    a headless Service (clusterIP None) whose selector matches its pods.

Not translated, and said so when met: probes (podman runs them only under
systemd), NetworkPolicy (the network is internal: nothing outside reaches
it), Namespace (one network per play instead), podFailurePolicy rules other
than FailJob on exit codes (DisruptionTarget: no disruptions happen here),
resource requests and limits (this machine's hybrid cgroups). env
valueFrom, Deployments and any other kind are refused.

Containers are named RUN-POD (RUN from --run-id) and labelled
psync-play=RUN, so that a caller can remove whatever a killed play left.

Usage:
  play_k8s.py play RENDERED.yaml --work DIR [--run-id ID]
              [--kill POD --when GLOB [--signal SIG]] [--exec-after POD COMMAND]
              [--event POD REGEX ACTION]... [--statefulset-rate RATE]
--event fires ACTION once POD's log has a line matching REGEX (the job's
progress, e.g. the coordinator's lines), each event after the one before;
ACTION is parallelism=N (the Job's) or evict=POD (SIGTERM, then SIGKILL
after its grace period, and the Job may start a pending index in its
place, as for a pod that an eviction deletes). A play whose events did not
all fire fails.
  play_k8s.py native RENDERED.yaml --work DIR
Either takes --blas-core CORE, which pins the job's BLAS kernels in its
ConfigMap (training.blas_core).
The second writes DIR/job.pbtxt (the ConfigMap's file) and prints the job
flags a worker's command line adds to it, one per line, so that a native
run can use the same configuration. Exit status 0 when the Job completed.
"""

import argparse
import base64
import glob
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import yaml

IGNORED_KINDS = {"Namespace", "NetworkPolicy", "PersistentVolumeClaim", "Service", "ConfigMap",
                 "Secret"}
RANK_FLAGS = ("--config=", "--server_rank=", "--worker_rank=")


def log(message):
    print(f"[play] {message}", flush=True)


# podman's settings for this (see the file); a CONTAINERS_CONF given wins.
CONTAINERS_CONF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "containers.conf")


def podman(*args, check=True):
    env = {"CONTAINERS_CONF": CONTAINERS_CONF, **os.environ}
    try:
        result = subprocess.run(["podman", *args], capture_output=True, text=True, env=env,
                                timeout=120)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"podman {' '.join(args[:2])}: no answer within 120 s")
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:2])}: {result.stderr.strip()}")
    return result


def shape_link(container, rate):
    """Shapes `container`'s network link to `rate` each way (a tc rate such as
    200mbit): a tbf on its eth0 and one on the host's end of its veth, found
    by the index `ip` gives eth0's peer (`eth0@ifN`; /sys/class/net under
    nsenter would be the host's). Both go with the veth when the container
    is removed."""
    pid = podman("inspect", "--format", "{{.State.Pid}}", container).stdout.strip()
    netns = ["nsenter", "-t", pid, "-n"]
    inside = subprocess.run(netns + ["ip", "-o", "link", "show", "eth0"], capture_output=True,
                            text=True)
    peer = re.search(r"^\d+: eth0@if(\d+):", inside.stdout)
    if peer is None:
        raise RuntimeError(f"{container}: its eth0 is not a veth "
                           f"({(inside.stdout + inside.stderr).strip()!r})")
    host = subprocess.run(["ip", "-o", "link", "show"], check=True, capture_output=True,
                          text=True).stdout
    host_end = re.search(rf"^{peer.group(1)}: ([^:@]+)[@:]", host, re.MULTILINE)
    if host_end is None or not host_end.group(1).startswith("veth"):
        raise RuntimeError(f"{container}: its eth0's peer, index {peer.group(1)}, is not a veth "
                           f"of this host")
    tbf = ["root", "tbf", "rate", rate, "burst", "256kb", "latency", "100ms"]
    for cmd in (["tc", "qdisc", "replace", "dev", host_end.group(1), *tbf],
                netns + ["tc", "qdisc", "replace", "dev", "eth0", *tbf]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{container}: {' '.join(cmd)}: {done.stderr.strip()}")


class Cluster:
    """The containers of one play; every one is removed by close()."""

    def __init__(self, docs, work, run_id):
        self.work = os.path.abspath(work)
        self.run_id = run_id
        self.by_kind = {}
        for doc in docs:
            self.by_kind.setdefault(doc["kind"], []).append(doc)
        unknown = set(self.by_kind) - IGNORED_KINDS - {"StatefulSet", "Job"}
        if unknown:
            raise ValueError(f"cannot play kinds {sorted(unknown)}")
        for kind, instead in (("NetworkPolicy", "the podman network is internal"),
                              ("Namespace", "one podman network per play")):
            if kind in self.by_kind:
                log(f"not translated: {kind} ({instead})")
        self.network = f"psync-play-{run_id}"
        self.containers = {}  # pod name -> container name, for close()
        self.statefulset_rate = None  # play --statefulset-rate
        self.restarts = {}
        self.stop_by = {}  # a stopped pod -> when it gets SIGKILL

    # --- volumes -----------------------------------------------------------
    def _folder(self, *parts, owner=None):
        path = os.path.join(self.work, *parts)
        os.makedirs(path, exist_ok=True)
        if owner is not None:
            os.chown(path, owner, owner)
        return path

    def _named(self, kind, name):
        for doc in self.by_kind.get(kind, []):
            if doc["metadata"]["name"] == name:
                return doc
        raise ValueError(f"no {kind} named {name}")

    def _volume_args(self, pod_spec, container, claims):
        """podman -v/--tmpfs arguments for the container's volumeMounts;
        `claims` maps a claim template's name to its host folder."""
        fs_group = pod_spec.get("securityContext", {}).get("fsGroup")
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        args = []
        for mount in container.get("volumeMounts", []):
            name, path = mount["name"], mount["mountPath"]
            mode = "ro" if mount.get("readOnly") else "rw"
            if name in claims:
                args += ["-v", f"{claims[name]}:{path}:{mode}"]
                continue
            volume = volumes.get(name)
            if volume is None:
                raise ValueError(f"volumeMount {name} has no volume")
            if "configMap" in volume:
                cm_name = volume["configMap"]["name"]
                folder = self._folder("configmaps", cm_name)
                for key, value in self._named("ConfigMap", cm_name).get("data", {}).items():
                    with open(os.path.join(folder, key), "w") as f:
                        f.write(value)
                args += ["-v", f"{folder}:{path}:ro"]
            elif "secret" in volume:
                secret_name = volume["secret"]["secretName"]
                secret = self._named("Secret", secret_name)
                folder = self._folder("secrets", secret_name)
                files = {k: base64.b64decode(v) for k, v in secret.get("data", {}).items()}
                files.update({k: v.encode() for k, v in secret.get("stringData", {}).items()})
                for key, value in files.items():
                    path_on_host = os.path.join(folder, key)
                    with open(path_on_host, "wb") as f:
                        f.write(value)
                    os.chmod(path_on_host, volume["secret"].get("defaultMode", 0o644))
                    os.chown(path_on_host, 0, fs_group if fs_group is not None else 0)
                args += ["-v", f"{folder}:{path}:ro"]
            elif "persistentVolumeClaim" in volume:
                folder = self._folder("pvc", volume["persistentVolumeClaim"]["claimName"],
                                      owner=fs_group)
                args += ["-v", f"{folder}:{path}:{mode}"]
            elif "emptyDir" in volume:
                # (podman's tmpfs takes no owner: writable by everyone instead)
                args += ["--tmpfs", f"{path}:rw,size=256m,mode=1777"]
            else:
                raise ValueError(f"volume {name}: only configMap, secret, persistentVolumeClaim "
                                 "and emptyDir can be played")
        return args

    # --- containers --------------------------------------------------------
    def _run(self, name, image_override, pod_spec, claims, hostname, aliases, env):
        if len(pod_spec["containers"]) != 1:
            raise ValueError(f"{name}: one container per pod can be played")
        container = pod_spec["containers"][0]
        pod_security = pod_spec.get("securityContext", {})
        security = {**pod_security, **container.get("securityContext", {})}
        for what in ("readinessProbe", "livenessProbe", "startupProbe"):
            if what in container:
                log(f"{name}: not translated: {what}")
        if "resources" in container:
            log(f"{name}: not translated: resources")
        container_name = f"{self.run_id}-{name}"
        # Recorded first: a container created but not started is removed too.
        self.containers[name] = container_name
        args = ["run", "-d", "--name", container_name, "--label", f"psync-play={self.run_id}",
                "--hostname", hostname, "--network", self.network, "--dns", self.dns,
                "--dns-option", "timeout:1", "--dns-option", "attempts:5"]
        for alias in aliases:
            args += ["--network-alias", alias]
        if "runAsUser" in security:
            args += ["--user", f"{security['runAsUser']}:{security.get('runAsGroup', 0)}"]
        if security.get("readOnlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]
        if "ALL" in security.get("capabilities", {}).get("drop", []):
            args += ["--cap-drop=all"]
        if security.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        for item in container.get("env", []):
            if "value" not in item:
                raise ValueError(f"{name}: env {item['name']}: only plain values can be played")
            args += ["-e", f"{item['name']}={item['value']}"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        args += self._volume_args(pod_spec, container, claims)
        command = container.get("command", [])
        if command:
            args += ["--entrypoint", command[0]]
        args += [image_override or container["image"], *command[1:], *container.get("args", [])]
        podman(*args)

    def _check_service(self, sts):
        """The headless Service whose names the pods get must exist and
        select them."""
        name = sts["spec"]["serviceName"]
        service = next((s for s in self.by_kind.get("Service", [])
                        if s["metadata"]["name"] == name), None)
        if service is None:
            raise ValueError(f"StatefulSet {sts['metadata']['name']}: no Service {name}")
        if service["spec"].get("clusterIP") != "None":
            raise ValueError(f"Service {name} is not headless (clusterIP None)")
        labels = sts["spec"]["template"]["metadata"].get("labels", {})
        selector = service["spec"].get("selector", {})
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            raise ValueError(f"Service {name} selector {selector} does not match the pods of "
                             f"StatefulSet {sts['metadata']['name']} ({labels})")

    def start(self, image):
        podman("network", "create", "--internal", self.network)
        # Containers ask the network's own DNS (aardvark-dns, at its gateway)
        # alone, and again after a second: podman would also list the host's
        # resolvers, unreachable from an internal network, where a query the
        # just-started aardvark-dns misses waits for them (under load a
        # worker's channel to a server once stayed CONNECTING for 17 s, the
        # server listening and the other pods connected to it).
        self.dns = podman("network", "inspect", self.network, "--format",
                          "{{range .Subnets}}{{.Gateway}}{{end}}").stdout.strip()
        self.statefulsets = []
        for sts in self.by_kind.get("StatefulSet", []):
            name, service = sts["metadata"]["name"], sts["spec"]["serviceName"]
            self._check_service(sts)
            namespace = sts["metadata"].get("namespace", "default")
            spec = sts["spec"]["template"]["spec"]
            fs_group = spec.get("securityContext", {}).get("fsGroup")
            for i in range(sts["spec"].get("replicas", 1)):
                pod = f"{name}-{i}"
                claims = {t["metadata"]["name"]: self._folder("pvc", f"{t['metadata']['name']}-{pod}",
                                                              owner=fs_group)
                          for t in sts["spec"].get("volumeClaimTemplates", [])}
                self._run(pod, image, spec, claims, pod,
                          [f"{pod}.{service}", f"{pod}.{service}.{namespace}.svc.cluster.local"], {})
                if self.statefulset_rate:
                    shape_link(self.containers[pod], self.statefulset_rate)
                self.statefulsets.append(pod)
        self.jobs = []
        for job in self.by_kind.get("Job", []):
            s = job["spec"]
            if s.get("completionMode") != "Indexed":
                raise ValueError(f"Job {job['metadata']['name']}: only Indexed Jobs can be played")
            if s["template"]["spec"].get("restartPolicy") != "Never":
                raise ValueError("only restartPolicy Never can be played for a Job")
            fail_codes = set()
            for rule in s.get("podFailurePolicy", {}).get("rules", []):
                codes = rule.get("onExitCodes")
                if rule["action"] == "FailJob" and codes and codes["operator"] == "In":
                    fail_codes |= set(codes["values"])
                else:
                    log(f"not translated: podFailurePolicy rule {rule['action']} "
                        "(no pod conditions arise here)")
            state = {"job": job, "image": image, "fail_codes": fail_codes,
                     "backoff": s.get("backoffLimit", 6), "failures": 0,
                     "parallelism": s.get("parallelism", 1),
                     "grace": s["template"]["spec"].get("terminationGracePeriodSeconds", 30),
                     "pods": {}, "done": set(), "terminating": {}}
            self._fill(state)
            self.jobs.append(state)

    def _fill(self, state):
        """Starts pods for the lowest pending indexes up to parallelism."""
        busy = set(state["pods"]) | set(state["terminating"].values())
        pending = [i for i in range(state["job"]["spec"]["completions"])
                   if i not in state["done"] and i not in busy]
        for index in pending[:max(0, state["parallelism"] - len(state["pods"]))]:
            self._start_job_pod(state, index)

    def scale(self, parallelism):
        """Sets the Job's parallelism; stops the excess pods, the highest
        indexes first."""
        state = self.jobs[0]
        state["parallelism"] = parallelism
        excess = sorted(state["pods"], reverse=True)[:max(0, len(state["pods"]) - parallelism)]
        for index in excess:
            self.evict(state["pods"][index])
        self._fill(state)

    def evict(self, pod):
        """SIGTERM to an active Job pod, as when it is deleted; SIGKILL
        after its grace period (step). Its index stays its own until it
        exits."""
        state = self.jobs[0]
        index = next((i for i, p in state["pods"].items() if p == pod), None)
        if index is None:
            raise ValueError(f"evict {pod}: not an active pod of the Job "
                             f"({', '.join(state['pods'].values())})")
        log(f"{pod} (index {index}) gets SIGTERM")
        podman("kill", "-s", "TERM", self.containers[pod])
        del state["pods"][index]
        state["terminating"][pod] = index
        self.stop_by[pod] = time.monotonic() + state["grace"]

    def _start_job_pod(self, state, index):
        job = state["job"]
        name = job["metadata"]["name"]
        attempt = state["failures"]
        pod = f"{name}-{index}-{attempt}"
        self._run(pod, state["image"], job["spec"]["template"]["spec"], {}, pod, [],
                  {"JOB_COMPLETION_INDEX": str(index)})
        state["pods"][index] = pod

    def status(self, pod):
        out = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
                     self.containers[pod]).stdout
        status, code = out.split()
        return status, int(code)

    def step(self):
        """One round of the control loop. Returns None while running, else
        the Job's outcome: "complete" or a reason it failed."""
        for pod in self.statefulsets:
            status, code = self.status(pod)
            if status == "exited":
                self.restarts[pod] = self.restarts.get(pod, 0) + 1
                log(f"{pod} exited with code {code}; restarting it (restart {self.restarts[pod]})")
                podman("start", self.containers[pod])
                if self.statefulset_rate:  # a new network namespace: shaped again
                    shape_link(self.containers[pod], self.statefulset_rate)
        for state in self.jobs:
            pods = [(i, p, False) for i, p in state["pods"].items()]
            pods += [(i, p, True) for p, i in state["terminating"].items()]
            for index, pod, stopped in pods:
                status, code = self.status(pod)
                if status != "exited":
                    if stopped and time.monotonic() > self.stop_by[pod]:
                        log(f"{pod}: grace period over, SIGKILL")
                        podman("kill", "-s", "KILL", self.containers[pod], check=False)
                        self.stop_by[pod] = float("inf")
                    continue
                state["terminating"].pop(pod, None)
                state["pods"].pop(index, None)
                failed = self._exited(state, index, pod, code)
                if failed:
                    return failed
            self._fill(state)
            if len(state["done"]) < state["job"]["spec"]["completions"]:
                return None
        return "complete"

    def _exited(self, state, index, pod, code):
        """Counts a Job pod that exited; returns why the Job failed, if it
        did."""
        if code == 0:
            state["done"].add(index)
            log(f"{pod} (index {index}) completed")
            return None
        if code in state["fail_codes"]:
            return f"{pod} exited with code {code}: podFailurePolicy FailJob"
        state["failures"] += 1
        if state["failures"] > state["backoff"]:
            return f"{pod} exited with code {code}: backoffLimit {state['backoff']} reached"
        log(f"{pod} exited with code {code}; index {index} is pending again")
        return None

    def close(self):
        """Stops the StatefulSet pods as Kubernetes would at deletion
        (SIGTERM, then the grace period), keeps every log, removes all."""
        os.makedirs(os.path.join(self.work, "logs"), exist_ok=True)
        servers = [self.containers[p] for p in getattr(self, "statefulsets", [])]
        if servers:
            podman("stop", "-t", "30", *servers, check=False)
        for pod, container in self.containers.items():
            logs = podman("logs", container, check=False)
            with open(os.path.join(self.work, "logs", f"{pod}.log"), "w") as f:
                f.write(logs.stdout + logs.stderr)
            podman("rm", "-f", container, check=False)
        podman("network", "rm", "-f", self.network, check=False)


def stop_on_sigterm(signum, frame):
    raise SystemExit(f"signal {signum}")  # runs close() on the way out


def play(args, docs):
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    cluster = Cluster(docs, args.work, args.run_id)
    cluster.statefulset_rate = args.statefulset_rate
    deadline = time.monotonic() + args.timeout
    outcome = None
    killed = args.kill is None
    events = list(args.event or [])
    try:
        cluster.start(args.image)
        log(f"started {', '.join(cluster.containers)} on network {cluster.network}")
        if args.kill is not None and args.kill not in cluster.containers:
            raise ValueError(f"--kill {args.kill}: no such pod (pods: "
                             f"{', '.join(cluster.containers)})")
        while outcome is None:
            if time.monotonic() > deadline:
                outcome = f"timed out after {args.timeout} s"
                break
            if not killed and glob.glob(os.path.join(cluster.work, args.when)):
                log(f"{args.when} exists: sending SIG{args.signal} to {args.kill}")
                podman("kill", "-s", args.signal, cluster.containers[args.kill])
                killed = True
            if events and fire_event(cluster, *events[0]):
                events.pop(0)
            time.sleep(0.2)
            outcome = cluster.step()
        if outcome == "complete" and args.exec_after:
            pod, command = args.exec_after
            ran = podman("exec", cluster.containers[pod], *shlex.split(command), check=False)
            for line in (ran.stdout + ran.stderr).splitlines():
                log(f"{pod}$ {line}")
            if ran.returncode != 0:
                outcome = f"'{command}' in {pod} exited with code {ran.returncode}"
    finally:
        cluster.close()
    if not killed:
        outcome = f"{args.when} never appeared: {args.kill} was not signalled"
    if events and outcome == "complete":
        pod, pattern, action = events[0]
        outcome = (f"the job ended before {pod} logged /{pattern}/: {action} and the events after "
                   "it never happened (the steps ran too fast for them?)")
    log(f"job {outcome}; logs in {os.path.join(cluster.work, 'logs')}")
    return 0 if outcome == "complete" else 1


def fire_event(cluster, pod, pattern, action):
    """Does `action` if `pod`'s log matches `pattern`; whether it did."""
    if pod not in cluster.containers:
        return False  # (not started yet)
    logs = podman("logs", cluster.containers[pod], check=False)
    if not re.search(pattern, logs.stdout + logs.stderr, re.MULTILINE):
        return False
    log(f"{pod} logged /{pattern}/: {action}")
    what, _, value = action.partition("=")
    if what == "parallelism" and value.isdigit():
        cluster.scale(int(value))
    elif what == "evict":
        cluster.evict(value)
    else:
        raise ValueError(f"--event action {action!r}: expected parallelism=N or evict=POD")
    return True


def pin_blas_core(docs, core):
    """Sets training.blas_core in every ConfigMap's job configuration."""
    for doc in docs:
        if doc["kind"] != "ConfigMap":
            continue
        for key, text in doc.get("data", {}).items():
            if not key.endswith(".pbtxt"):
                continue
            text = re.sub(r'(?m)^[ \t]*blas_core:.*\n', "", text)
            pinned, found = re.subn(r'(?m)^training \{\n', f'training {{\n  blas_core: "{core}"\n',
                                    text, count=1)
            doc["data"][key] = pinned if found else text + f'\ntraining {{ blas_core: "{core}" }}\n'


def native(args, docs):
    """Writes the ConfigMap's file and prints the job flags of a worker."""
    job = next(d for d in docs if d["kind"] == "Job")
    container = job["spec"]["template"]["spec"]["containers"][0]
    config = next(a for a in container.get("args", []) if a.startswith("--config="))
    key = os.path.basename(config.split("=", 1)[1])
    data = next(d for d in docs if d["kind"] == "ConfigMap" and key in d.get("data", {}))
    os.makedirs(args.work, exist_ok=True)
    with open(os.path.join(args.work, key), "w") as f:
        f.write(data["data"][key])
    for arg in container.get("args", []):
        if not arg.startswith(RANK_FLAGS):
            print(arg)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["play", "native"])
    parser.add_argument("rendered", help="output of kubectl kustomize")
    parser.add_argument("--work", required=True, help="folder for volumes and logs")
    parser.add_argument("--image", help="play every container with this image instead")
    parser.add_argument("--run-id", default=f"play{os.getpid()}",
                        help="prefix of the container names, value of their psync-play label")
    parser.add_argument("--kill", help="pod to signal once --when exists")
    parser.add_argument("--signal", default="KILL", help="the signal --kill sends")
    parser.add_argument("--when", help="glob under --work, e.g. 'pvc/checkpoints-psync-server-1/*'")
    parser.add_argument("--exec-after", nargs=2, metavar=("POD", "COMMAND"),
                        help="once the Job completes, run COMMAND in POD; it must exit 0")
    parser.add_argument("--event", nargs=3, action="append", metavar=("POD", "REGEX", "ACTION"),
                        help="once POD's log matches REGEX (after the events before it): "
                             "parallelism=N or evict=POD")
    parser.add_argument("--statefulset-rate", metavar="RATE",
                        help="shape each StatefulSet pod's link to RATE each way (tc tbf, e.g. "
                             "200mbit; needs root): it paces a job whose steps would outrun "
                             "podman's actions on a loaded machine")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--blas-core",
                        help="pin the job's BLAS kernels (training.blas_core in the ConfigMap)")
    args = parser.parse_args()
    if (args.kill is None) != (args.when is None):
        parser.error("--kill and --when go together")
    with open(args.rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    if args.blas_core:
        pin_blas_core(docs, args.blas_core)
    try:
        return play(args, docs) if args.mode == "play" else native(args, docs)
    except (ValueError, RuntimeError) as e:
        log(f"FAILED: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
