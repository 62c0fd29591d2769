"""Torch workers in an elastic job (--min_workers=1 --max_workers=3) on two
servers: workers 0 and 1 start; worker 2 joins when the job reaches step
JOIN_AT, worker 1 leaves on SIGTERM at step LEAVE_AT, and workers 0 and 2
train to the end. Each step's global batch (MAX_WORKERS x BATCH_PER_DEVICE
samples) is a function of the step alone and is divided among that step's
members by psync.torch's share (the C++ rule). Worker 0's final weights must
be within RTOL (relative to each tensor's largest value) of those of a fixed
job of three torch workers with the same global batch.

The events follow the job's progress, not the clock: worker 0 holds before
step JOIN_AT until worker 2 has registered (so step JOIN_AT cannot finish
before the join, and worker 0's next calls meet the new generation), and
worker 1 holds before step LEAVE_AT until the test's SIGTERM.

Run as `torch_elastic_test.py worker RANK OUT_DIR [--hold_at=S]
[--wait_signal_at=S] FLAG...` it is one worker process."""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence

import torch
import torch.nn.functional as F

import psync
import psync.torch as pt
from psync_servers import BOUND_S, Servers, wait_all
from torch_test_util import Mlp, weights_of

MAX_WORKERS = 3
BATCH_PER_DEVICE = 8
STEPS = 40
JOIN_AT = 10
LEAVE_AT = 25
RTOL = 1e-5
JOB = [f"--steps={STEPS}", f"--batch_per_device={BATCH_PER_DEVICE}", "--chunk_kb=1",
       "--lr=0.05", "--momentum=0.9", "--weight_decay=0.01", "--seed=3", "--deterministic",
       "--pull_timeout_s=60", "--rpc_timeout_s=60", "--connect_timeout_s=60",
       "--peer_timeout_s=60"]
FIXED = JOB + [f"--num_workers={MAX_WORKERS}"]
ELASTIC = JOB + ["--min_workers=1", f"--max_workers={MAX_WORKERS}"]


def batch(step: int, samples: int):
    """Step `step`'s global batch: a function of the step alone."""
    g = torch.Generator().manual_seed(5000 + step)
    return torch.randn(samples, 20, generator=g), torch.randint(0, 4, (samples,), generator=g)


def marker(out_dir: str, name: str) -> str:
    return os.path.join(out_dir, name)


def touch(path: str, text: str = "") -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.rename(path + ".tmp", path)  # whole when it appears


def await_file(path: str, what: str, processes: Sequence[subprocess.Popen] = ()) -> None:
    """Waits, at most BOUND_S, for `path`; fails naming `what` if a process of
    `processes` exits first or time runs out."""
    deadline = time.monotonic() + BOUND_S
    while not os.path.exists(path):
        for p in processes:
            if p.poll() is not None:
                raise AssertionError(f"{what}: a worker exited with {p.returncode} first")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {BOUND_S} s")
        time.sleep(0.02)


def check_refusals(opt: pt.DistributedOptimizer) -> None:
    """A step this worker trains cannot be waited out, nor a fixed job left."""
    calls = [opt.wait_out] + ([] if opt.job.elastic else [opt.leave])
    for call in calls:
        try:
            call()
        except pt.OptimizerError as e:
            print(f"refused as expected: {e}", flush=True)
        else:
            raise AssertionError(f"{call.__name__}() was not refused")


def train(rank: int, out_dir: str, own: argparse.Namespace, job_args: List[str]) -> int:
    """One torch worker: trains each step it is a member of on its share of the
    step's global batch, waits out the others, recovers after ABORTED and
    leaves on SIGTERM, as examples/torch/fashion_mnist.py does."""
    job = pt.init(job_args + [f"--worker_rank={rank}"])
    torch.manual_seed(0)  # the servers' weights replace these
    model = Mlp()
    with pt.StopOnSignal() as stop, pt.DistributedOptimizer(model, job) as opt:
        touch(marker(out_dir, f"registered-{rank}"), str(opt.step_number))
        if rank == 0:
            check_refusals(opt)
        while opt.step_number < job.steps:
            if opt.step_number == own.wait_signal_at:
                touch(marker(out_dir, f"reached-{rank}"))
                stop.wait(BOUND_S)
            if stop.requested:
                opt.leave()
                print(f"worker {rank} left before step {opt.step_number}", flush=True)
                return 0
            if opt.step_number == own.hold_at:
                touch(marker(out_dir, f"reached-{rank}"))
                await_file(marker(out_dir, own.hold_for), f"worker {rank} held at {own.hold_at}")
            try:
                if not opt.trains:
                    opt.wait_out()
                    continue
                x, y = batch(opt.step_number, job.global_batch)
                mine = opt.share(len(x))
                opt.zero_grad()
                opt.samples = mine.stop - mine.start
                F.cross_entropy(model(x[mine]), y[mine]).backward()
                opt.step()
            except psync.Error as e:
                if e.code != "ABORTED":
                    raise
                was = opt.step_number
                print(f"worker {rank}: ABORTED at step {was}; resumes at {opt.recover()} with "
                      f"workers {list(opt.members.ranks)}", flush=True)
    torch.save(weights_of(model), marker(out_dir, f"final-{rank}.pt"))
    return 0


def worker(rank: int, out_dir: str, flags: Sequence[str], own: Sequence[str] = ()):
    return subprocess.Popen([sys.executable, __file__, "worker", str(rank), out_dir] +
                            list(own) + list(flags))


def fixed_run(out_dir: str) -> Dict[str, torch.Tensor]:
    with Servers(FIXED, count=2) as servers:
        codes = wait_all([worker(r, out_dir, FIXED + [servers.flag]) for r in range(MAX_WORKERS)])
    assert codes == [0] * MAX_WORKERS, f"fixed run: exit codes {codes}"
    return torch.load(marker(out_dir, "final-0.pt"))


def elastic_run(out_dir: str) -> Dict[str, torch.Tensor]:
    with Servers(ELASTIC, count=2) as servers:
        flags = ELASTIC + [servers.flag]
        first = [worker(0, out_dir, flags, [f"--hold_at={JOIN_AT}", "--hold_for=registered-2"]),
                 worker(1, out_dir, flags, [f"--wait_signal_at={LEAVE_AT}"])]
        everyone = list(first)
        try:
            await_file(marker(out_dir, "reached-0"), f"worker 0 at step {JOIN_AT}", first)
            everyone.append(worker(2, out_dir, flags))  # joins the running job
            await_file(marker(out_dir, "reached-1"), f"worker 1 at step {LEAVE_AT}", everyone)
            everyone[1].send_signal(signal.SIGTERM)
            codes = wait_all(everyone)
        finally:
            wait_all(everyone)  # none is left running
    assert codes == [0] * MAX_WORKERS, f"elastic run: exit codes {codes}"
    with open(marker(out_dir, "registered-2"), encoding="utf-8") as f:
        joined = int(f.read())
    assert joined == JOIN_AT, f"worker 2 joined at step {joined}, expected {JOIN_AT}"
    assert not os.path.exists(marker(out_dir, "final-1.pt")), "worker 1 trained to the end"
    final = torch.load(marker(out_dir, "final-0.pt"))
    other = torch.load(marker(out_dir, "final-2.pt"))
    for name in final:
        assert torch.equal(final[name], other[name]), f"workers 0 and 2 differ in {name}"
    return final


def main() -> int:
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        fixed_dir, elastic_dir = os.path.join(tmp, "fixed"), os.path.join(tmp, "elastic")
        os.mkdir(fixed_dir)
        os.mkdir(elastic_dir)
        started = time.monotonic()
        fixed = fixed_run(fixed_dir)
        elastic = elastic_run(elastic_dir)
        worst = 0.0
        for name, a in fixed.items():
            b = elastic[name]
            scale = max(a.abs().max().item(), 1e-30)
            worst = max(worst, (a - b).abs().max().item() / scale)
        print(f"elastic vs fixed, {STEPS} steps: max |difference| / largest |value| = "
              f"{worst:.2e} (bound {RTOL}); {time.monotonic() - started:.1f} s", flush=True)
        assert worst <= RTOL, f"the elastic run's weights are {worst:.2e} from the fixed run's"
    print("PASS", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        parser = argparse.ArgumentParser()
        parser.add_argument("--hold_at", type=int, default=-1)
        parser.add_argument("--hold_for", default="")
        parser.add_argument("--wait_signal_at", type=int, default=-1)
        own_args, job_flags = parser.parse_known_args(sys.argv[4:])
        sys.exit(train(int(sys.argv[2]), sys.argv[3], own_args, job_flags))
    sys.exit(main())
