"""Exactness of psync.torch.LocalOptimizer against single-process torch.optim,
with real psync_server processes: two servers, two machines of two local
processes each (gloo groups, torchrun's variables), a global batch of 64 (16
per process), 30 steps. SGD with momentum and weight decay, Nesterov, Adam
and AdamW (the settings of tests/torch_test_util.py): every parameter within
RTOL of torch.optim on the same global batches with the mean loss; all four
processes' weights equal, bit for bit. The harness (the local processes, the
torch reference) serves torch_local_exact_modes_test.py too.

Run as `torch_local_exact_test.py local OUT FAULT TIMEOUT_S ARGS...` (torchrun's
variables in its environment; FAULT is unused, `none`) it is one local process
(see torch_local_test.Machines), saving its state to OUT; its own flag
`--model=mlp|bn` picks the model."""

import argparse
import sys
import unittest
from typing import Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F

import psync.torch as pt
import torch_test_util as tu
from psync_servers import Servers
from torch_local_test import Machines

STEPS = 30
WORKERS, DEVICES, BATCH_PER_DEVICE = 2, 2, 16  # a global batch of 64
JOB = [f"--steps={STEPS}", f"--num_workers={WORKERS}", f"--devices={DEVICES}",
       f"--batch_per_device={BATCH_PER_DEVICE}", "--chunk_kb=1", "--pull_timeout_s=60",
       "--rpc_timeout_s=60", "--connect_timeout_s=30", "--peer_timeout_s=60"]
GROUP_TIMEOUT_S = 60
RTOL = 1e-5

Tensors = Dict[str, torch.Tensor]
State = Tuple[Tensors, Tensors]  # (parameters, buffers) by name


class BatchNormNet(torch.nn.Module):
    """20 -> 32, BatchNorm1d, ReLU, -> 4."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 32)
        self.bn = torch.nn.BatchNorm1d(32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def make_model(kind: str) -> torch.nn.Module:
    if kind == "mlp":
        return tu.Mlp()
    if kind == "bn":
        return BatchNormNet()
    raise ValueError(f"--model={kind}: expected mlp or bn")


def global_batch(step: int, size: int):
    """Step `step`'s global batch of `size` samples: a function of the step alone."""
    g = torch.Generator().manual_seed(700 + step)
    return torch.randn(size, 20, generator=g), torch.randint(0, 4, (size,), generator=g)


def state_of(model: torch.nn.Module) -> State:
    """CPU copies of `model`'s parameters and buffers."""
    return ({n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()},
            {n: b.to("cpu", copy=True) for n, b in model.named_buffers()})


def local_main(out: str, args: Sequence[str]) -> None:
    """One local process: device `device_rank`'s share of every global batch,
    `accumulation_steps` consecutive micro-batches of `batch_per_device`, on
    its local rank's GPU where --device=auto finds one per local process, else
    the CPU."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mlp")
    own, rest = parser.parse_known_args(list(args))
    job = pt.init(rest)
    local = pt.init_local(job, timeout_s=GROUP_TIMEOUT_S)
    device = job.torch_device(local.rank, local.size)
    torch.manual_seed(job.seed)  # worker 0's root's model is the start: alike on reruns
    model = make_model(own.model).to(device)
    try:
        with pt.LocalOptimizer(model, job, local) as opt:
            first = state_of(model)
            k, n = job.accumulation_steps, job.batch_per_device
            while opt.step_number < job.steps:
                x, y = (t.to(device) for t in global_batch(opt.step_number, job.global_batch))
                opt.zero_grad()
                for m in range(k):
                    start = (opt.device_rank * k + m) * n
                    F.cross_entropy(model(x[start:start + n]), y[start:start + n]).backward()
                opt.step()
    finally:
        local.close()
    torch.save([first, state_of(model)], out)


def train_torch(first: State, settings: tu.Settings, kind: str, global_size: int,
                ghost: int = 0) -> Tuple[Tensors, Dict[int, Tensors]]:
    """The same steps in one process with torch.optim, on the mean loss of each
    global batch of `global_size`. With `ghost` > 0 each of the global batch's
    `ghost`-sample shares (a device's) goes through the model on its own, their
    mean losses weighted by share size, and the running statistics of each
    machine root's device are kept apart, updated from its shares only.
    Returns the parameters and, by root device, those buffers."""
    model = make_model(kind)
    model.load_state_dict({**first[0], **first[1]})
    opt = tu.torch_optimizer(model.parameters(), settings)
    roots = {worker * DEVICES: dict(first[1]) for worker in range(WORKERS)}
    for step in range(STEPS):
        x, y = global_batch(step, global_size)
        opt.zero_grad(set_to_none=False)
        if not ghost:
            F.cross_entropy(model(x), y).backward()
        for device, start in enumerate(range(0, global_size if ghost else 0, ghost or 1)):
            share = slice(start, start + ghost)
            own = roots.get(device)
            if own is not None:
                model.load_state_dict(own, strict=False)
            (F.cross_entropy(model(x[share]), y[share]) * ghost / global_size).backward()
            if own is not None:
                roots[device] = state_of(model)[1]
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        opt.step()
    return state_of(model)[0], roots


def run_job(flags: Sequence[str], kind: str = "mlp") -> List[Tuple[State, State]]:
    """Two servers and two machines of two local processes training `kind` with
    the job's `flags`; each process's (first, last) state, machine by machine."""
    job = JOB + list(flags)
    with Servers(job, count=2) as servers, \
            Machines([servers.flag, f"--model={kind}"] + job, workers=WORKERS,
                     local_size=DEVICES, timeout_s=GROUP_TIMEOUT_S,
                     script=__file__) as machines:
        results = machines.wait()
        if [code for code, _ in results] != [0] * WORKERS * DEVICES:
            raise AssertionError(f"a local process failed: {results}")
    return [torch.load(out) for out in machines.outs]


class ExactnessCase(unittest.TestCase):
    """Checks of a job's local processes against each other and the reference."""

    def assert_same_weights(self, runs: List[Tuple[State, State]]) -> None:
        """Every process starts and ends with the same bits in every parameter."""
        (first, _), (last, _) = runs[0]
        for ((other_first, _), (other_last, _)) in runs[1:]:
            for name in first:
                self.assertTrue(torch.equal(other_first[name], first[name]), name)
                self.assertTrue(torch.equal(other_last[name], last[name]), name)

    def assert_close(self, got: Tensors, want: Tensors, what: str) -> float:
        """Each tensor within RTOL of its largest value; returns the largest
        relative error."""
        worst = 0.0
        for name in want:
            err = (got[name].double() - want[name].double()).abs().max().item()
            scale = want[name].double().abs().max().item()
            self.assertLessEqual(err, RTOL * scale,
                                 f"{what}: {name} off by {err}, largest {scale}")
            worst = max(worst, err / scale if scale else err)
        print(f"{what}: largest relative error {worst:.1e}", file=sys.stderr)
        return worst


class LocalExactnessTest(ExactnessCase):

    def test_four_optimizers_train_as_one_torch_process(self):
        for name, settings in [("sgd momentum", tu.SGD_MOMENTUM),
                               ("nesterov", tu.SGD_NESTEROV), ("adam", tu.ADAM),
                               ("adamw", tu.ADAMW)]:
            with self.subTest(name):
                # From the servers' seed values (He-uniform). From torch's own,
                # smaller initial values some of fc3's AdamW gradients are at
                # float32's rounding level, and Adam's normalised step makes
                # that rounding a difference past RTOL: torch against itself,
                # summing the batch per device instead of whole, differs by
                # 1.3e-5 there, psync by 1.6e-5.
                runs = run_job(tu.job_flags(settings) + ["--init_from=seed"])
                self.assert_same_weights(runs)
                first, last = runs[0]
                want, _ = train_torch(first, settings, "mlp", len(runs) * BATCH_PER_DEVICE)
                self.assert_close(last[0], want, name)
                for n in ("fc1.weight", "fc3.bias"):
                    self.assertFalse(torch.equal(last[0][n], first[0][n]), n)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "local":
        local_main(sys.argv[2], sys.argv[5:])
    else:
        unittest.main(verbosity=2)
