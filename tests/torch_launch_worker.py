"""A torch worker for //tests:torch_launch_test, run by psync_launch
--worker_cmd (or by hand): trains a tiny MLP through DistributedOptimizer on
synthetic data whose global batch is a function of (--seed, step), so a
restarted worker recomputes any step exactly; worker 0 saves the final
weights (torch.save of the state_dict) to --out.

Its own flags, before the job's (which psync_launch appends):
  --out=FILE            where worker 0 writes the weights
  --pause_worker=R      worker R stops inside step K, after its backward
  --pause_at_step=K     (pushes in flight, before step()), prints "paused at
  --pause_marker=FILE   step K" and waits until FILE.go exists (or it is
                        killed); only if it creates FILE, so a restarted
                        worker, or one replaying the step, trains on.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

import psync
import psync.torch as pt

PAUSE_LIMIT_S = 120  # a paused worker nobody kills or resumes gives up, failing


def global_batch(job: pt.Job, step: int):
    """Step `step`'s global batch: a function of (seed, step) alone."""
    g = torch.Generator().manual_seed(job.seed * 100003 + step)
    return (torch.randn(job.global_batch, 12, generator=g),
            torch.randint(0, 3, (job.global_batch,), generator=g))


def pause_once(step: int, marker: str) -> None:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    print(f"paused at step {step}", flush=True)
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not os.path.exists(marker + ".go"):
        if time.monotonic() > deadline:
            sys.exit(f"paused at step {step} for {PAUSE_LIMIT_S} s and nobody killed or "
                     "resumed this worker")
        time.sleep(0.05)
    print(f"resumed at step {step}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="")
    parser.add_argument("--pause_worker", type=int, default=-1)
    parser.add_argument("--pause_at_step", type=int, default=-1)
    parser.add_argument("--pause_marker", default="")
    own, job_args = parser.parse_known_args()
    job = pt.init(job_args)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    with pt.DistributedOptimizer(model, job) as opt:
        print(f"worker {job.worker_rank} resumes from step {opt.step_number}", flush=True)
        while opt.step_number < job.steps:
            step = opt.step_number
            x, y = global_batch(job, step)
            first = job.worker_rank * job.worker_batch
            mine = slice(first, first + job.worker_batch)
            try:
                opt.zero_grad()
                F.cross_entropy(model(x[mine]), y[mine]).backward()
                if job.worker_rank == own.pause_worker and step == own.pause_at_step:
                    pause_once(step, own.pause_marker)
                opt.step()
            except psync.Error as e:
                if e.code != "ABORTED":
                    raise
                print(f"the servers rolled back: resuming from step {opt.recover()}", flush=True)
    print(f"worker {job.worker_rank} trained {job.steps} steps", flush=True)
    if job.worker_rank == 0 and own.out:
        torch.save(model.state_dict(), own.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
