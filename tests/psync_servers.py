"""Real psync_server processes for the Python tests: K servers of one job on
127.0.0.1, started from the test's runfiles, ready once each has written its
port file, stopped (SIGTERM, then SIGKILL) when the `with` block ends."""

import os
import socket
import subprocess
import time
import urllib.request
from typing import List, Sequence

BOUND_S = 60  # the longest a server may take to start or stop


def free_port() -> int:
    """A port nothing listens on now (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Servers:
    """`count` servers of the job `job` (its flags, --num_workers among them);
    `addresses` is their --servers list, `flag` the flag itself, and
    `metrics_ports` where each serves its Prometheus metrics."""

    def __init__(self, job: Sequence[str], count: int = 1) -> None:
        self.addresses: List[str] = [f"127.0.0.1:{free_port()}" for _ in range(count)]
        self.flag = "--servers=" + ",".join(self.addresses)
        self.metrics_ports: List[int] = [free_port() for _ in range(count)]
        self._job = list(job)
        self._processes: List[subprocess.Popen] = []

    def __enter__(self) -> "Servers":
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
                if process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise RuntimeError(f"psync_server {rank} did not start "
                                       f"(exit code {process.returncode})")
                time.sleep(0.05)
        return self

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
