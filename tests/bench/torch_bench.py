"""Training speed of PyTorch workers through psync, against torch's own DDP and
one torch process (docs/performance.md, "PyTorch workers").

Every configuration trains the same model on the same synthetic
Fashion-MNIST-shaped data (a function of --seed and the step) with the same
global batch and SGD with momentum, on 127.0.0.1:

  psync 1s / 2s  2 torch processes through psync.torch.DistributedOptimizer,
                 1 or 2 psync_server processes
  local 1s       1 machine of 2 local torch processes through
                 psync.torch.LocalOptimizer (a gloo group; the root alone
                 pushes), 1 psync_server
  ddp            2 torch processes, torch.nn.parallel.DistributedDataParallel
                 on gloo, torch.optim.SGD
  single         1 torch process, the whole global batch, torch.optim.SGD,
                 --single_threads threads (the whole machine)
  single 1t      the same on 1 thread
  alone          2 torch processes that never communicate, each its share
                 and torch.optim.SGD: the compute floor of the 2-process rows
  cxx 1s         2 psync_worker processes (the same model in C++), 1 server

Each worker process gets --worker_threads intra-op threads (torch, OpenMP and
OpenBLAS), as DDP's processes and psync_worker's devices do; the single
process gets --single_threads (the whole machine). A configuration's time
is worker 0's wall time from the end of its --warmup-th step to the end of
its last step; runs go through every configuration in turn, --runs times,
so drift hits each alike. Prints a table of medians, one JSON line per
configuration, the targets' ratios (each the median of the runs' ratios,
measured side by side), and worker 0's step in parts (forward, backward,
the optimizer's step; psync_worker's from its --trace) with its process's
CPU time per step.

    tests/bench/torch_bench.sh                  # builds, then runs this
    python3 tests/bench/torch_bench.py --bin_dir=bazel-bin --runs=5

Run as `torch_bench.py --worker=KIND ...` it is one worker process of a
configuration (what the driver starts).
"""

import argparse
import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from psync_servers import free_port  # noqa: E402  (tests/: ports the kernel does not hand out)

MODELS = ("mlp", "cnn")
WORKERS = 2  # the psync, DDP and C++ configurations' worker processes
POOL = 4096  # synthetic samples; step t's batch is rows t*B.. (mod POOL)
# A torch worker's step, timed in parts: forward (with the batch and
# zero_grad), backward (with psync's hooks and the pushes they start), and
# the optimizer's step (psync: pushing the rest, waiting, copying weights in).
PHASES = ("forward", "backward", "step")
# What the phase table shows: the phases, and the worker's CPU time (every
# thread of its process) per timed step.
COLUMNS = PHASES + ("cpu",)


# ---------------------------------------------------------------------------
# Worker side: one process of a configuration. Imports torch only here.

def build_model(kind: str):
    """The model psync_worker's --model=mlp / --model=cnn computes (worker/model/):
    784-256-128-10 with ReLUs; conv 5x5 'same' 16 -> pool -> conv 5x5 32 ->
    pool -> fc 128 -> fc 10 with ReLUs."""
    import torch
    nn = torch.nn
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def synthetic_data(kind: str, seed: int):
    """POOL images in [0, 1) and labels, drawn from `seed`: Fashion-MNIST's shapes."""
    import torch
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(POOL, 784, generator=g)
    y = torch.randint(0, 10, (POOL,), generator=g)
    return (x if kind == "mlp" else x.reshape(POOL, 1, 28, 28)), y


def share(step: int, global_batch: int, rank: int, ranks: int) -> slice:
    """Rank `rank`'s contiguous share of step `step`'s global batch, as row indices."""
    start = (step * global_batch) % (POOL - global_batch + 1)
    per = global_batch // ranks
    return slice(start + rank * per, start + (rank + 1) * per)


def run_worker(a: argparse.Namespace, job_args: List[str]) -> None:
    """Trains `a.steps` steps of configuration `a.worker` and prints one JSON line:
    the seconds from the end of step `a.warmup` to the end of the last."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = synthetic_data(a.model, a.seed)
    model = build_model(a.model)
    ranks = 1 if a.worker == "single" else a.ranks
    if a.worker == "psync":
        import psync.torch as pt
        job = pt.init(job_args)
        ranks, rank = job.num_workers, job.worker_rank
        opt = pt.DistributedOptimizer(model, job)
    elif a.worker == "local":
        import psync.torch as pt
        job = pt.init(job_args)
        local = pt.init_local(job, timeout_s=a.config_timeout)
        opt = pt.LocalOptimizer(model, job, local)
        ranks, rank = job.num_workers * job.devices, opt.device_rank
    else:
        rank = a.rank
        if a.worker == "ddp":
            import torch.distributed as dist
            dist.init_process_group("gloo", init_method=f"tcp://{a.master}:{a.port}",
                                    rank=rank, world_size=ranks)
            model = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    start, cpu_start = time.monotonic(), time.process_time()
    loss = None
    phases = {p: [] for p in PHASES}  # seconds of each phase of each timed step
    for step in range(a.steps):
        if step == a.warmup:
            start, cpu_start = time.monotonic(), time.process_time()
        t0 = time.perf_counter()
        rows = share(step, a.global_batch, rank, ranks)
        opt.zero_grad()
        loss = F.cross_entropy(model(x[rows]), y[rows])
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if step >= a.warmup:
            for p, dt in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2)):
                phases[p].append(dt)
    seconds, cpu = time.monotonic() - start, time.process_time() - cpu_start
    if a.worker in ("psync", "local"):
        opt.finish()
    if a.worker == "local":
        local.close()
    elif a.worker == "ddp":
        torch.distributed.destroy_process_group()
    print("RESULT " + json.dumps({"rank": rank, "seconds": seconds, "loss": loss.item(),
                                  "cpu": cpu / (a.steps - a.warmup),
                                  **{p: statistics.median(v) for p, v in phases.items()}}),
          flush=True)


# ---------------------------------------------------------------------------
# Driver side: servers and workers as process groups of their own.

class Processes:
    """Every process the driver started, each the leader of a process group of its
    own; `stop()` ends every group (SIGTERM, then SIGKILL) and waits for them."""

    def __init__(self) -> None:
        self._running: List[subprocess.Popen] = []

    def start(self, argv: Sequence[str], log: str, env: Dict[str, str]) -> subprocess.Popen:
        with open(log, "w") as out:
            p = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
        self._running.append(p)
        return p

    def stop(self) -> None:
        for p in self._running:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self._running:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group's other processes too
            except ProcessLookupError:
                pass
            p.wait()
        self._running.clear()


def listening(p: subprocess.Popen, port_file: str, log: str, rank: int) -> bool:
    """Whether server `rank` has written its port file; raises if it exited
    first (a port another process took since free_port(), say), with its
    log's last lines."""
    if os.path.exists(port_file):
        return True
    if p.poll() is None:
        return False
    with open(log, errors="replace") as f:
        tail = "".join(f.readlines()[-5:])
    raise RuntimeError(f"torch_bench: psync_server {rank} exited with {p.returncode} before it "
                       f"listened; the end of {log}:\n{tail}")


def thread_env(threads: int, pythonpath: str) -> Dict[str, str]:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    env["PYTHONPATH"] = pythonpath
    return env


class Bench:
    """The driver: runs configurations and collects each one's seconds per step."""

    def __init__(self, a: argparse.Namespace, work: str) -> None:
        self.a = a
        self.work = work
        self.procs = Processes()
        self.deadline = time.monotonic() + a.timeout
        self.count = 0
        # (model, config) -> worker 0's median phase times of each run
        self.phases: Dict[tuple, List[Dict[str, float]]] = {}

    def steps(self, model: str) -> int:
        return self.a.mlp_steps if model == "mlp" else self.a.cnn_steps

    def job(self, model: str, servers: List[str]) -> List[str]:
        a = self.a
        return ["--servers=" + ",".join(servers), f"--num_workers={WORKERS}",
                f"--batch_per_device={a.global_batch // WORKERS}", f"--steps={self.steps(model)}",
                f"--lr={a.lr}", f"--momentum={a.momentum}", f"--seed={a.seed}",
                *a.psync_flags.split()]

    def start_servers(self, count: int, job_extra: List[str], model: str) -> List[str]:
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(count)]
        job = self.job(model, addresses) + job_extra
        started = []
        for rank, address in enumerate(addresses):
            port_file = os.path.join(self.dir, f"server{rank}.port")
            log = os.path.join(self.dir, f"server{rank}.log")
            p = self.procs.start([os.path.join(self.a.bin_dir, "psync_server"), *job,
                                  f"--server_rank={rank}", "--port=" + address.rsplit(":", 1)[1],
                                  "--port_file=" + port_file],
                                 log, thread_env(self.a.worker_threads, ""))
            started.append((p, port_file, log))
        for rank, (p, port_file, log) in enumerate(started):
            self.wait_for(lambda: listening(p, port_file, log, rank),
                          f"psync_server {rank}'s port file")
        return addresses

    def wait_for(self, ready, what: str) -> None:
        limit = min(self.deadline, time.monotonic() + self.a.config_timeout)
        while not ready():
            if time.monotonic() > limit:
                raise TimeoutError(f"torch_bench: {what} not ready within the time limits "
                                   f"(--config_timeout={self.a.config_timeout}, "
                                   f"--timeout={self.a.timeout}); logs in {self.dir}")
            time.sleep(0.02)

    def torch_worker(self, kind: str, model: str, rank: int, threads: int,
                     extra: List[str], env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
        a = self.a
        argv = [a.python, os.path.abspath(__file__), f"--worker={kind}", f"--model={model}",
                f"--rank={rank}", f"--threads={threads}", f"--steps={self.steps(model)}",
                f"--warmup={a.warmup}", f"--global_batch={a.global_batch}", f"--lr={a.lr}",
                f"--momentum={a.momentum}", f"--seed={a.seed}", *extra]
        return self.procs.start(argv, os.path.join(self.dir, f"worker{rank}.log"),
                                {**thread_env(threads, a.python_path), **(env or {})})

    def finish(self, workers: List[subprocess.Popen]) -> None:
        self.wait_for(lambda: all(p.poll() is not None for p in workers), "the workers' exit")
        for rank, p in enumerate(workers):
            if p.returncode != 0:
                with open(os.path.join(self.dir, f"worker{rank}.log")) as f:
                    tail = f.read()[-2000:]
                raise RuntimeError(f"torch_bench: worker {rank} exited with code {p.returncode}; "
                                   f"the end of its log ({self.dir}):\n{tail}")

    def run(self, config: str, model: str) -> float:
        """Seconds per steady step of one run of `config` on `model`."""
        self.count += 1
        self.dir = os.path.join(self.work, f"{self.count:03d}-{config.replace(' ', '')}-{model}")
        os.mkdir(self.dir)
        try:
            return self.run_in_dir(config, model)
        finally:
            self.procs.stop()

    def run_in_dir(self, config: str, model: str) -> float:
        a = self.a
        timed = self.steps(model) - a.warmup
        if config.startswith("single"):
            threads = 1 if config == "single 1t" else a.single_threads
            w = [self.torch_worker("single", model, 0, threads, [])]
        elif config == "alone":
            w = [self.torch_worker("alone", model, r, a.worker_threads, [])
                 for r in range(WORKERS)]
        elif config == "ddp":
            port = str(free_port())
            w = [self.torch_worker("ddp", model, r, a.worker_threads, [f"--port={port}"])
                 for r in range(WORKERS)]
        elif config == "local 1s":  # one machine: --num_workers=1, --devices=2
            servers = self.start_servers(1, ["--num_workers=1", "--devices=2"], model)
            port = str(free_port())
            w = [self.torch_worker("local", model, r, a.worker_threads,
                                   ["--", *self.job(model, servers), "--num_workers=1",
                                    "--devices=2", "--worker_rank=0"],
                                   {"LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(WORKERS),
                                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
                 for r in range(WORKERS)]
        elif config.startswith("psync"):
            servers = self.start_servers(int(config[-2]), [], model)
            w = [self.torch_worker("psync", model, r, a.worker_threads,
                                   ["--", *self.job(model, servers), f"--worker_rank={r}"])
                 for r in range(WORKERS)]
        else:  # cxx: psync_worker; worker 0 writes a CSV row per step
            servers = self.start_servers(1, [f"--model={model}"], model)
            csv_path = os.path.join(self.dir, "steps.csv")
            trace_path = os.path.join(self.dir, "trace.json")  # worker 0's
            w = [self.procs.start(
                [os.path.join(a.bin_dir, "psync_worker"), *self.job(model, servers),
                 f"--model={model}", f"--worker_rank={r}", f"--synthetic_samples={POOL * 16}",
                 f"--metrics_csv={csv_path}", f"--trace={trace_path}",
                 f"--trace_steps={self.steps(model)}"],
                os.path.join(self.dir, f"worker{r}.log"), thread_env(a.worker_threads, ""))
                for r in range(WORKERS)]
            self.finish(w)
            self.phases.setdefault((model, config), []).append(trace_phases(trace_path, a.warmup))
            return csv_seconds(csv_path, a.warmup, self.steps(model)) / timed
        self.finish(w)
        result = worker0_result(os.path.join(self.dir, "worker0.log"))
        self.phases.setdefault((model, config), []).append({c: result[c] for c in COLUMNS})
        return result["seconds"] / timed


def worker0_result(log: str) -> Dict[str, float]:
    with open(log) as f:
        for line in f:
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"torch_bench: {log} has no RESULT line")


def trace_phases(path: str, warmup: int) -> Dict[str, float]:
    """psync_worker's --trace, in the torch rows' parts: its one span of forward and
    backward (as "backward"; "forward" is NaN), and the rest of the step."""
    with open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    compute, whole = {}, {}
    for e in events:
        step = e.get("args", {}).get("step", -1)
        if e.get("ph") != "X" or step < warmup:
            continue
        if e["name"] == "forward + backward":
            compute[step] = e["dur"] * 1e-6
        elif e["name"] == f"step {step}":
            whole[step] = e["dur"] * 1e-6
    steps = sorted(set(compute) & set(whole))
    if not steps:
        raise RuntimeError(f"torch_bench: {path} has no step after {warmup}")
    return {"forward": float("nan"), "backward": statistics.median(compute[s] for s in steps),
            "step": statistics.median(whole[s] - compute[s] for s in steps), "cpu": float("nan")}


def csv_seconds(path: str, warmup: int, steps: int) -> float:
    """psync_worker's --metrics_csv: wall seconds from the end of step `warmup` (its
    rows count steps from 1) to the end of step `steps`."""
    wall = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["kind"] == "step":
                wall[int(row["step"])] = float(row["wall_s"])
    if warmup not in wall or steps not in wall:
        raise RuntimeError(f"torch_bench: {path} lacks step {warmup} or {steps}")
    return wall[steps] - wall[warmup]


# ---------------------------------------------------------------------------
# Report.

CONFIGS = ("psync 1s", "psync 2s", "local 1s", "ddp", "single", "single 1t", "alone", "cxx 1s")
# The targets: (name, configuration, baseline, bound): met where the
# configuration's samples/s are at least `bound` times the baseline's (more
# than, for a bound of 1). "best single" is, run by run, the faster single row.
TARGETS = (
    ("psync >= 2x DDP's samples/s, 1 server", "psync 1s", "ddp", 2.0),
    ("psync >= 2x DDP's samples/s, 2 servers", "psync 2s", "ddp", 2.0),
    ("2 psync workers faster than 1 torch process, 1 server", "psync 1s", "best single", 1.0),
    ("2 psync workers faster than 1 torch process, 2 servers", "psync 2s", "best single", 1.0),
    ("torch path's step within 10 % of psync_worker's, 1 server", "psync 1s", "cxx 1s", 1 / 1.1),
)


def with_best_single(t: Dict[str, List[float]]) -> Dict[str, List[float]]:
    singles = [t[c] for c in ("single", "single 1t") if c in t]
    return dict(t, **({"best single": [min(v) for v in zip(*singles)]} if singles else {}))


def report_phases(phases: Dict[tuple, List[Dict[str, float]]]) -> None:
    print("\nworker 0's step in parts, ms (median over the runs of each run's median step; "
          "psync_worker's forward and backward are one span, under backward; cpu: the process's "
          "CPU time per step, every thread):")
    print(f"{'model':5} {'configuration':13} " + " ".join(f"{c:>9}" for c in COLUMNS))
    for (model, config), runs in phases.items():
        print(f"{model:5} {config:13} " +
              " ".join(f"{statistics.median(r[c] for r in runs) * 1e3:9.2f}" for c in COLUMNS))


def report(a: argparse.Namespace, times: Dict[str, Dict[str, List[float]]]) -> None:
    print(f"\nmedian of {a.runs} runs; global batch {a.global_batch}; worker processes "
          f"{a.worker_threads} thread(s) each, single {a.single_threads}")
    print(f"{'model':5} {'configuration':13} {'ms/step':>9} {'samples/s':>10} {'range ms':>17}")
    for model in a.models:
        for config in a.configs:
            s = times[model][config]
            med = statistics.median(s)
            print(f"{model:5} {config:13} {med * 1e3:9.2f} {a.global_batch / med:10.0f} "
                  f"{min(s) * 1e3:8.2f}-{max(s) * 1e3:<8.2f}")
    for model in a.models:
        for config in a.configs:
            s = times[model][config]
            print("JSON " + json.dumps({
                "model": model, "config": config, "global_batch": a.global_batch,
                "runs": len(s), "ms_per_step": round(statistics.median(s) * 1e3, 3),
                "samples_per_s": round(a.global_batch / statistics.median(s), 1),
                "ms_per_step_runs": [round(v * 1e3, 3) for v in s]}))
    print("\nratios, each the median of the runs' ratios (samples/s over the baseline's):")
    for model in a.models:
        t = with_best_single(times[model])
        for config in ("psync 1s", "psync 2s", "local 1s", "ddp", "cxx 1s"):
            if config in t and "alone" in t:
                print(f"  {model}: {config} / alone (compute only): "
                      f"{statistics.median(c / n for n, c in zip(t[config], t['alone'])):.2f}")
        for name, num, den, bound in TARGETS:
            if num not in t or den not in t:
                continue
            ratio = statistics.median(d / n for n, d in zip(t[num], t[den]))
            met = ratio > bound if bound == 1.0 else ratio >= bound
            shown = f"{ratio:.2f}" + (f" (step time {1 / ratio:.3f}x)" if den == "cxx 1s" else "")
            print(f"  {model}: target {name}: {shown}: {'met' if met else 'NOT met'}")


def parse(argv: Sequence[str]):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--global_batch", type=int, default=128)
    p.add_argument("--mlp_steps", type=int, default=300)
    p.add_argument("--cnn_steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the timing")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--worker_threads", type=int, default=1)
    p.add_argument("--psync_flags", default="",
                   help="job flags added to psync's servers and workers, e.g. '--overlap_min_kb=64'")
    p.add_argument("--single_threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--bin_dir", default="bazel-bin",
                   help="where server/psync_server, worker/psync_worker and worker/torch/python are")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="the interpreter with torch that psync was built for")
    p.add_argument("--timeout", type=float, default=900, help="the whole benchmark, seconds")
    p.add_argument("--config_timeout", type=float, default=180, help="one run of one configuration")
    p.add_argument("--keep", action="store_true", help="keep the logs' folder")
    # A worker process's own flags (set by the driver).
    p.add_argument("--worker", choices=("psync", "local", "ddp", "single", "alone"))
    p.add_argument("--model", choices=MODELS, default="mlp")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ranks", type=int, default=WORKERS,
                   help="a worker's: the processes of its configuration (tests/bench/"
                        "cluster_bench.py's DDP runs across hosts give more)")
    p.add_argument("--master", default="127.0.0.1", help="a DDP worker's: rank 0's address")
    a, rest = p.parse_known_args(argv)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if a.worker is None:
        validate(p, a, rest)
    return a, rest


def validate(p: argparse.ArgumentParser, a: argparse.Namespace, rest: List[str]) -> None:
    if rest:
        p.error(f"unknown arguments {rest}")
    a.models = a.models.split(",")
    a.configs = a.configs.split(",")
    for m in a.models:
        if m not in MODELS:
            p.error(f"--models names '{m}', expected some of {','.join(MODELS)}")
    for c in a.configs:
        if c not in CONFIGS:
            p.error(f"--configs names '{c}', expected some of {','.join(CONFIGS)}")
    for name in ("runs", "global_batch", "worker_threads", "single_threads"):
        if getattr(a, name) < 1:
            p.error(f"--{name} is {getattr(a, name)}, expected 1 or more")
    if a.global_batch % WORKERS:
        p.error(f"--global_batch is {a.global_batch}, expected a multiple of {WORKERS}")
    if a.global_batch > POOL // 2:
        p.error(f"--global_batch is {a.global_batch}, expected at most {POOL // 2}")
    if not 0 < a.warmup < min(a.mlp_steps, a.cnn_steps):
        p.error(f"--warmup is {a.warmup}, expected 1 or more and fewer than the steps "
                f"(--mlp_steps={a.mlp_steps}, --cnn_steps={a.cnn_steps})")


def main(argv: Sequence[str]) -> int:
    a, rest = parse(argv)
    if a.worker is not None:
        run_worker(a, rest)
        return 0
    # Private copies: a concurrent bazel build may replace bazel-bin's files.
    work = tempfile.mkdtemp(prefix="psync_torch_bench.")
    status = 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        bin_dir = os.path.join(work, "bin")
        os.mkdir(bin_dir)
        for rel in ("server/psync_server", "worker/psync_worker"):
            shutil.copy(os.path.join(a.bin_dir, rel), bin_dir)
        shutil.copytree(os.path.join(a.bin_dir, "worker/torch/python"),
                        os.path.join(work, "python"), symlinks=False)
        a.bin_dir, a.python_path = bin_dir, os.path.join(work, "python")
        bench = Bench(a, work)
        times = {m: {c: [] for c in a.configs} for m in a.models}
        try:
            for run in range(a.runs):
                for model in a.models:
                    # Each run starts at another configuration: none is always first.
                    order = a.configs[run % len(a.configs):] + a.configs[:run % len(a.configs)]
                    for config in order:
                        s = bench.run(config, model)
                        times[model][config].append(s)
                        print(f"run {run + 1}/{a.runs} {model} {config}: {s * 1e3:.2f} ms/step",
                              flush=True)
        except TimeoutError as e:
            # Out of time: what the finished runs measured is still worth printing.
            print(f"{e}\nstopped there; the figures below are of the runs that finished",
                  flush=True)
            a.keep = True
            status = 1
            a.models = [m for m in a.models if all(times[m][c] for c in a.configs)] or \
                [m for m in a.models if any(times[m].values())][:1]
            if a.models:
                a.configs = [c for c in a.configs if all(times[m][c] for m in a.models)]
                a.runs = min(len(times[m][c]) for m in a.models for c in a.configs)
        if a.models and a.configs:
            report(a, times)
            report_phases(bench.phases)
    except BaseException:
        a.keep = True  # the error names logs in it
        raise
    finally:
        if a.keep:
            print(f"logs in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
