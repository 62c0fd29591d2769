"""Real psync_server processes for the Python tests: K servers of one job on
127.0.0.1, started from the test's runfiles, ready once each has written its
port file, stopped (SIGTERM, then SIGKILL) when the `with` block ends.

Every server is told every address before it starts, so the ports are picked
here and bound by the servers later: another process may take one meanwhile.
A server that fails to start with the exit code of a failure a restart may
cure (1, as a port taken is) is started again, with all the job's servers, on
fresh ports."""

import os
import random
import socket
import subprocess
import time
import urllib.request
from typing import List, Optional, Sequence

BOUND_S = 60  # the longest a server may take to start or stop
START_TRIES = 3  # a port taken between its pick and the server's bind, twice more
EXIT_FAILED = 1  # psync's exit code of a failure a restart may cure

_handed_out = set()  # every port free_port returned in this process


def _ports_the_kernel_keeps() -> List[range]:
    """Ports from 10000 outside the kernel's ephemeral range, which it hands
    out by itself to every connect and every bind to port 0: one of these,
    once closed, is taken only by a process that names it, where a port of
    that range may go to any process's next connection before the server
    (or gloo group) that was to have it binds it."""
    lo, hi = 32768, 60999  # Linux's default
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        pass
    return [r for r in (range(10000, lo), range(max(hi + 1, 10000), 65536)) if len(r) > 0]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port() -> int:
    """A port nothing listens on now (bound, then closed), outside the
    kernel's ephemeral range where it can be, never one this process was
    given before: two servers of one job, or a server's port and its metrics
    port, would then be the same (a bad configuration)."""
    ranges = _ports_the_kernel_keeps()
    pick = random.SystemRandom()
    for _ in range(64 if ranges else 0):
        r = pick.choices(ranges, weights=[len(x) for x in ranges])[0]
        port = pick.choice(r)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    while True:  # none free there: one the kernel picks
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


class Servers:
    """`count` servers of the job `job` (its flags, --num_workers among them);
    `addresses` is their --servers list, `flag` the flag itself, and
    `metrics_ports` where each serves its Prometheus metrics."""

    def __init__(self, job: Sequence[str], count: int = 1) -> None:
        self._count = count
        self._job = list(job)
        self._processes: List[subprocess.Popen] = []

    def __enter__(self) -> "Servers":
        for attempt in range(1, START_TRIES + 1):
            code = self._start()
            if code is None:
                return self
            if code != EXIT_FAILED:
                break
        raise RuntimeError(f"psync_server did not start (exit code {code}, "
                           f"attempt {attempt} of {START_TRIES})")

    def _start(self) -> Optional[int]:
        """Starts the servers on fresh ports; None once all are listening, else
        the exit code of one that did not start (all are stopped then)."""
        self.addresses: List[str] = [f"127.0.0.1:{free_port()}" for _ in range(self._count)]
        self.flag = "--servers=" + ",".join(self.addresses)
        self.metrics_ports: List[int] = [free_port() for _ in range(self._count)]
        self._processes = []
        runfiles = os.path.join(os.environ["TEST_SRCDIR"], "psync")
        tmp = os.environ["TEST_TMPDIR"]
        port_files = []
        for rank, address in enumerate(self.addresses):
            port_file = os.path.join(tmp, f"server{rank}.{address.rsplit(':', 1)[1]}.port")
            port_files.append(port_file)
            self._processes.append(subprocess.Popen(
                [os.path.join(runfiles, "server/psync_server"), self.flag,
                 f"--server_rank={rank}", "--port=" + address.rsplit(":", 1)[1],
                 "--port_file=" + port_file, f"--metrics_port={self.metrics_ports[rank]}"] +
                self._job))
        deadline = time.monotonic() + BOUND_S
        for rank, (process, port_file) in enumerate(zip(self._processes, port_files)):
            while not os.path.exists(port_file):
                if process.poll() is not None:
                    self.__exit__(None, None, None)
                    return process.returncode
                if time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise RuntimeError(f"psync_server {rank} wrote no port file in {BOUND_S} s")
                time.sleep(0.05)
        return None

    def __exit__(self, *_unused) -> None:
        for p in self._processes:
            p.terminate()
        for p in self._processes:
            try:
                p.wait(timeout=BOUND_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def metric(self, rank: int, series: str) -> float:
        """The value of `series` (a metric's name and labels, as the text shows
        them) on server `rank`; 0 while the server has none."""
        url = f"http://127.0.0.1:{self.metrics_ports[rank]}/metrics"
        with urllib.request.urlopen(url, timeout=BOUND_S) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(series + " "):
                    return float(line.split()[-1])
        return 0.0


def wait_all(processes: Sequence[subprocess.Popen]) -> List[int]:
    """Every process's exit code, each waited for at most 4 x BOUND_S; any still
    running when this returns or raises (TimeoutExpired) is killed."""
    try:
        return [p.wait(timeout=4 * BOUND_S) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
