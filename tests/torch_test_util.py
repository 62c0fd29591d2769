"""What the psync.torch optimizer tests share: the model, the global batches
(a function of the step alone), the job's optimizer settings as one dict from
which both the job's flags and the matching torch.optim optimizer are made,
a worker training through psync, the same steps in one process with
torch.optim, and worker processes of their own.

Run as `torch_test_util.py worker RANK NUM_WORKERS OUT FLAG...` it is one
worker process of a multi-worker test: it trains with the job's flags FLAG...
and saves its weights (after registering and at the end) to OUT."""

import os
import subprocess
import sys
from typing import Dict, List, Mapping, Sequence, Union

import torch
import torch.nn.functional as F

import psync.torch as pt
from psync_servers import wait_all

STEPS = 10
BATCH = 32           # the global batch; a power of two, like the sample counts
LAST_BATCH = 16      # the last step's (partial) global batch
RTOL = 1e-5
# The job's flags but its optimizer's.
BASE_JOB = [f"--steps={STEPS}", "--chunk_kb=1", "--pull_timeout_s=60", "--rpc_timeout_s=60",
            "--connect_timeout_s=30", "--peer_timeout_s=60"]

Weights = Dict[str, torch.Tensor]
# An optimizer's settings under the job flags' names ("optimizer", "lr",
# "momentum", "nesterov", "weight_decay", "beta1", "beta2", "epsilon"); a
# name left out takes the job's default, which is torch.optim's.
Settings = Mapping[str, Union[str, float, bool]]

SGD_MOMENTUM: Settings = dict(optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=0.01)
SGD_NESTEROV: Settings = dict(optimizer="sgd", lr=0.05, momentum=0.9, nesterov=True,
                              weight_decay=0.01)
ADAM: Settings = dict(optimizer="adam", lr=0.01, weight_decay=0.01)  # L2; default betas, eps
ADAMW: Settings = dict(optimizer="adamw", lr=0.01, weight_decay=0.1, beta1=0.8, beta2=0.99,
                       epsilon=1e-6)


def job_flags(settings: Settings) -> List[str]:
    """The job's flags for `settings`: --optimizer=adamw, --nesterov, ..."""
    flags = []
    for name, value in settings.items():
        if isinstance(value, bool):
            flags.append(f"--{name}" if value else f"--no{name}")
        else:
            flags.append(f"--{name}={value}")
    return flags


def torch_optimizer(params, settings: Settings) -> torch.optim.Optimizer:
    """torch.optim's optimizer that applies what the servers apply for `settings`."""
    s = dict(settings)
    kind = s.pop("optimizer", "sgd")
    lr, wd = s.pop("lr"), s.pop("weight_decay", 0.0)
    if kind == "sgd":
        made = torch.optim.SGD(params, lr=lr, weight_decay=wd, momentum=s.pop("momentum", 0.0),
                               nesterov=s.pop("nesterov", False))
    elif kind in ("adam", "adamw"):
        adam = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        made = adam(params, lr=lr, weight_decay=wd,
                    betas=(s.pop("beta1", 0.9), s.pop("beta2", 0.999)),
                    eps=s.pop("epsilon", 1e-8))
    else:
        raise ValueError(f"optimizer {kind!r}: expected sgd, adam or adamw")
    if s:
        raise ValueError(f"settings {sorted(s)} do not apply to optimizer {kind!r}")
    return made


class Mlp(torch.nn.Module):
    """20 -> 32 -> 16 -> 4, and `spare`, which forward never uses."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 32)
        self.fc2 = torch.nn.Linear(32, 16)
        self.fc3 = torch.nn.Linear(16, 4)
        self.spare = torch.nn.Linear(4, 4)
        self.on_hidden = None  # called with fc1's output, for hooks on it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.on_hidden is not None:
            self.on_hidden(h)
        return self.fc3(torch.relu(self.fc2(torch.relu(h))))


def batch(step: int):
    """Step `step`'s global batch: a function of the step alone."""
    g = torch.Generator().manual_seed(1000 + step)
    n = LAST_BATCH if step == STEPS - 1 else BATCH
    return torch.randn(n, 20, generator=g), torch.randint(0, 4, (n,), generator=g)


def weights_of(model: torch.nn.Module) -> Weights:
    """CPU copies of `model`'s parameters, by name."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}


def train_worker(args: Sequence[str], rank: int, num_workers: int,
                 micro_batches: int = 1, staged: bool = False) -> List[Weights]:
    """Trains an Mlp through psync as worker `rank` of `num_workers`, on its
    share of every global batch (cut in `micro_batches` backward passes), on
    the job's device (a GPU where --device=auto finds one); returns its
    weights after registering and at the end. `staged`: DistributedOptimizer's."""
    job = pt.init(list(args) + [f"--worker_rank={rank}"])
    device = job.torch_device()
    torch.manual_seed(job.seed)  # worker 0's model is the job's start: alike on reruns
    model = Mlp().to(device)
    with pt.DistributedOptimizer(model, job, staged=staged) as opt:
        first = weights_of(model)
        while opt.step_number < STEPS:
            x, y = (t.to(device) for t in batch(opt.step_number))
            share = len(x) // num_workers
            x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
            opt.zero_grad()
            opt.samples = share // micro_batches  # the job's batch but for the last step
            for k in range(micro_batches):
                part = slice(k * opt.samples, (k + 1) * opt.samples)
                F.cross_entropy(model(x[part]), y[part]).backward()
            opt.step()
    return [first, weights_of(model)]


def train_torch(first: Weights, settings: Settings) -> Weights:
    """The same steps in one process with torch.optim on each global batch.
    The parameter forward never uses gets a zero gradient, psync's rule."""
    model = Mlp()
    model.load_state_dict(first)
    opt = torch_optimizer(model.parameters(), settings)
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        opt.step()
    return weights_of(model)


def train_worker_processes(args: Sequence[str], num_workers: int,
                           out_dir: str) -> List[List[Weights]]:
    """Runs `num_workers` workers of the job `args` (the --servers flag among
    them) as processes of their own; returns each one's train_worker result.
    Raises AssertionError naming a worker that failed."""
    outs = [os.path.join(out_dir, f"worker{r}.pt") for r in range(num_workers)]
    workers = [subprocess.Popen([sys.executable, __file__, "worker", str(r), str(num_workers),
                                 outs[r]] + list(args)) for r in range(num_workers)]
    codes = wait_all(workers)
    for rank, code in enumerate(codes):
        if code != 0:
            raise AssertionError(f"worker {rank} of {num_workers} exited with {code}")
    return [torch.load(o) for o in outs]


if __name__ == "__main__":
    if len(sys.argv) < 5 or sys.argv[1] != "worker":
        sys.exit("usage: torch_test_util.py worker RANK NUM_WORKERS OUT FLAG...")
    rank, count, out = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    torch.save(train_worker(sys.argv[5:], rank, count), out)
