"""Torch workers in an elastic job (--min_workers=2 --max_workers=3) on two
servers: workers 0 and 1 start (both are its first members, however far
apart their processes start); worker 2 joins when the job reaches step
JOIN_AT, worker 1 leaves on SIGTERM at step LEAVE_AT, and workers 0 and 2
train to the end. Each step's global batch (MAX_WORKERS x BATCH_PER_DEVICE
samples) is a function of the step alone and is divided among that step's
members by psync.torch's share (the C++ rule). Worker 0's final weights must
be within RTOL (relative to each tensor's largest value) of those of a fixed
job of three torch workers with the same global batch.

The events follow the job's progress, not the clock: worker 0 holds before
step JOIN_AT until worker 2 has registered (so step JOIN_AT cannot finish
before the join, and worker 0's next calls meet the new generation), and
worker 1 holds before step LEAVE_AT until the test's SIGTERM. Worker 0 then
stays idle for IDLE_S, past the servers' lease, as a script evaluating
between steps would: the change ended its session, but its heartbeat keeps
it a member, and no worker of the job may be counted lost.

Run as `torch_elastic_test.py worker RANK OUT_DIR [--hold_at=S]
[--wait_signal_at=S] FLAG...` it is one worker process."""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

import psync
import psync.torch as pt
from psync_servers import BOUND_S, Servers, free_port, wait_all
from torch_test_util import Mlp, weights_of

MAX_WORKERS = 3
BATCH_PER_DEVICE = 8
STEPS = 40
JOIN_AT = 10
LEAVE_AT = 25
RTOL = 1e-5
IDLE_S = 2.5  # worker 0's pause after the join, past the 1 s lease twice
LR, MOMENTUM, WD = 0.05, 0.9, 0.01
JOB = [f"--steps={STEPS}", f"--batch_per_device={BATCH_PER_DEVICE}", "--chunk_kb=1",
       f"--lr={LR}", f"--momentum={MOMENTUM}", f"--weight_decay={WD}", "--seed=3",
       "--deterministic",
       "--pull_timeout_s=60", "--rpc_timeout_s=60", "--connect_timeout_s=60",
       "--peer_timeout_s=60"]
FIXED = JOB + [f"--num_workers={MAX_WORKERS}"]
# At least 2: with 1, whichever of workers 0 and 1 registers first could
# train alone past JOIN_AT before the other's process has started.
ELASTIC = JOB + ["--min_workers=2", f"--max_workers={MAX_WORKERS}"]
# Machines of two local processes (--devices=2): two at most, one at least.
LOCAL = JOB + ["--min_workers=1", "--max_workers=2", "--devices=2"]
LOCAL_BATCH = 2 * 2 * BATCH_PER_DEVICE


def batch(step: int, samples: int):
    """Step `step`'s global batch: a function of the step alone."""
    g = torch.Generator().manual_seed(5000 + step)
    return torch.randn(samples, 20, generator=g), torch.randint(0, 4, (samples,), generator=g)


def marker(out_dir: str, name: str) -> str:
    return os.path.join(out_dir, name)


def touch(path: str, text: str = "") -> None:
    # One temporary name a process: a machine's local processes may mark
    # the same file at once.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.rename(tmp, path)  # whole when it appears


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


def optimizer(job: pt.Job, model: torch.nn.Module):
    """A DistributedOptimizer, or with torchrun's variables (LOCAL_RANK...) a
    LocalOptimizer of this machine's local group, and the group (or None)."""
    if "LOCAL_RANK" not in os.environ:
        return pt.DistributedOptimizer(model, job), None
    local = pt.init_local(job, timeout_s=BOUND_S)
    return pt.LocalOptimizer(model, job, local), local


def train(rank: int, out_dir: str, own: argparse.Namespace, job_args: List[str]) -> int:
    """One torch worker (a machine): trains each step it is a member of on its
    share of the step's global batch, waits out the others, recovers after
    ABORTED and leaves on SIGTERM, as examples/torch/fashion_mnist.py does."""
    job = pt.init(job_args + [f"--worker_rank={rank}"])
    torch.manual_seed(0)  # worker 0's model is the job's start: every worker builds the same
    model = Mlp()
    opt, local = optimizer(job, model)
    try:
        return train_steps(opt, local, model, out_dir, own)
    finally:
        if local is not None:
            local.close()


def train_steps(opt, local: Optional[pt.LocalGroup], model: torch.nn.Module, out_dir: str,
                own: argparse.Namespace) -> int:
    job, rank = opt.job, opt.job.worker_rank
    name = f"{rank}-{local.rank if local is not None else 0}"
    with pt.StopOnSignal() as stop, opt:
        torch.save(weights_of(model), marker(out_dir, f"first-{name}.pt"))
        touch(marker(out_dir, f"registered-{rank}"), str(opt.step_number))
        if rank == 0 and local is None:
            check_refusals(opt)
        while opt.step_number < job.steps:
            if opt.step_number == own.wait_signal_at:
                touch(marker(out_dir, f"reached-{name}"))
                stop.wait(BOUND_S)
            if stop.requested:
                opt.leave()
                print(f"worker {name} left before step {opt.step_number}", flush=True)
                return 0
            if opt.step_number == own.hold_at:
                touch(marker(out_dir, f"reached-{name}"))
                await_file(marker(out_dir, own.hold_for), f"worker {name} held at {own.hold_at}")
                time.sleep(IDLE_S)  # between steps, its session ended by the join
            try:
                train_step(opt, model, job)
            except psync.Error as e:
                if e.code != "ABORTED":
                    raise
                was = opt.step_number
                print(f"worker {name}: ABORTED at step {was}; resumes at {opt.recover()} with "
                      f"workers {list(opt.members.ranks)}", flush=True)
    torch.save(weights_of(model), marker(out_dir, f"final-{name}.pt"))
    return 0


def train_step(opt, model: torch.nn.Module, job: pt.Job) -> None:
    """Step opt.step_number on this worker's (or local process's) share, or
    waited out where other workers train it."""
    if not opt.trains:
        opt.wait_out()
        return
    x, y = batch(opt.step_number, job.global_batch)
    mine = opt.share(len(x))
    opt.zero_grad()
    opt.samples = mine.stop - mine.start
    if opt.samples:  # a local process's share may be empty
        F.cross_entropy(model(x[mine]), y[mine]).backward()
    opt.step()


def start(rank: int, out_dir: str, flags: Sequence[str], own: Sequence[str] = (),
          local_size: int = 0) -> List[subprocess.Popen]:
    """Worker `rank`: one process, or with `local_size` a machine of that many
    local processes (torchrun's variables, a gloo port of its own)."""
    command = [sys.executable, __file__, "worker", str(rank), out_dir] + list(own) + list(flags)
    if not local_size:
        return [subprocess.Popen(command)]
    port = str(free_port())
    return [subprocess.Popen(command, env=dict(
        os.environ, LOCAL_RANK=str(k), LOCAL_WORLD_SIZE=str(local_size),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=port)) for k in range(local_size)]


def final_weights(out_dir: str) -> Dict[str, torch.Tensor]:
    """Worker 0's (local rank 0's) final weights, checked equal to those of
    every other process that trained to the end."""
    final = torch.load(marker(out_dir, "final-0-0.pt"))
    for other in os.listdir(out_dir):
        if other.startswith("final-"):
            theirs = torch.load(marker(out_dir, other))
            for name in final:
                assert torch.equal(final[name], theirs[name]), f"{other} differs in {name}"
    return final


def fixed_run(out_dir: str) -> Dict[str, torch.Tensor]:
    with Servers(FIXED, count=2) as servers:
        processes = [start(r, out_dir, FIXED + [servers.flag])[0] for r in range(MAX_WORKERS)]
        codes = wait_all(processes)
    assert codes == [0] * MAX_WORKERS, f"fixed run: exit codes {codes}"
    return final_weights(out_dir)


def elastic_run(out_dir: str, job: Sequence[str], first: Sequence[int], joiner: int,
                leaver: int, local_size: int = 0) -> Dict[str, torch.Tensor]:
    """Workers `first` start; `joiner` joins when worker 0 reaches JOIN_AT
    (which holds there until it has registered); `leaver` gets SIGTERM (every
    local process of it) when it reaches LEAVE_AT. Returns worker 0's final
    weights."""
    with Servers(job, count=2) as servers:
        flags = list(job) + [servers.flag]
        signal_at = [f"--wait_signal_at={LEAVE_AT}"]
        own = {0: [f"--hold_at={JOIN_AT}", f"--hold_for=registered-{joiner}"], leaver: signal_at}
        machines = {r: start(r, out_dir, flags, own.get(r, []), local_size) for r in first}
        try:
            everyone = [p for m in machines.values() for p in m]
            await_file(marker(out_dir, "reached-0-0"), f"worker 0 at step {JOIN_AT}", everyone)
            machines[joiner] = start(joiner, out_dir, flags, own.get(joiner, []), local_size)
            everyone = [p for m in machines.values() for p in m]
            await_file(marker(out_dir, f"reached-{leaver}-0"), f"worker {leaver} at step {LEAVE_AT}",
                       everyone)
            for p in machines[leaver]:
                p.send_signal(signal.SIGTERM)
            codes = wait_all(everyone)
            lost = servers.metric(0, "psync_server_workers_lost_total")
        finally:
            wait_all([p for m in machines.values() for p in m])  # none is left running
    assert codes == [0] * len(codes), f"elastic run: exit codes {codes}"
    assert lost == 0, f"the coordinator counted {lost:.0f} worker(s) lost, expected none"
    with open(marker(out_dir, f"registered-{joiner}"), encoding="utf-8") as f:
        joined = int(f.read())
    assert joined == JOIN_AT, f"worker {joiner} joined at step {joined}, expected {JOIN_AT}"
    assert not os.path.exists(marker(out_dir, f"final-{leaver}-0.pt")), "the leaver trained on"
    return final_weights(out_dir)


def torch_run(out_dir: str, global_batch: int) -> Dict[str, torch.Tensor]:
    """The same steps in one process with torch.optim.SGD on each global batch,
    from worker 0's first weights; the parameter forward never uses gets a
    zero gradient, psync's rule."""
    model = Mlp()
    model.load_state_dict(torch.load(marker(out_dir, "first-0-0.pt")))
    sgd = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    for step in range(STEPS):
        x, y = batch(step, global_batch)
        sgd.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        sgd.step()
    return weights_of(model)


def distance(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> float:
    """The largest |a - b| of any tensor over that tensor's largest |a|."""
    return max((a[n] - b[n]).abs().max().item() / max(a[n].abs().max().item(), 1e-30)
               for n in a)


def main() -> int:
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        dirs = {k: os.path.join(tmp, k) for k in ("fixed", "elastic", "local")}
        for d in dirs.values():
            os.mkdir(d)
        started = time.monotonic()
        fixed = fixed_run(dirs["fixed"])
        elastic = elastic_run(dirs["elastic"], ELASTIC, first=[0, 1], joiner=2, leaver=1)
        worst = distance(fixed, elastic)
        print(f"elastic (workers 0, 1; 2 joins at {JOIN_AT}, 1 leaves at {LEAVE_AT}) vs fixed "
              f"(3 workers), {STEPS} steps: max |difference| / largest |value| = {worst:.2e} "
              f"(bound {RTOL}); {time.monotonic() - started:.1f} s", flush=True)
        assert worst <= RTOL, f"the elastic run's weights are {worst:.2e} from the fixed run's"
        started = time.monotonic()
        local = elastic_run(dirs["local"], LOCAL, first=[0], joiner=1, leaver=1, local_size=2)
        worst = distance(torch_run(dirs["local"], LOCAL_BATCH), local)
        print(f"elastic machines of 2 local processes (machine 1 joins at {JOIN_AT}, leaves at "
              f"{LEAVE_AT}) vs torch.optim on the whole batch: {worst:.2e} (bound {RTOL}); "
              f"{time.monotonic() - started:.1f} s", flush=True)
        assert worst <= RTOL, f"the local elastic run's weights are {worst:.2e} from torch.optim's"
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
