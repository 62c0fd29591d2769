"""psync.torch.LocalOptimizer against real psync_server processes: two
machines of two local processes each (four processes, a gloo group per
machine) train as one torch process with torch.optim.SGD (momentum, weight
decay) on the whole global batch, and end with identical weights; a local
process that dies fails its machine's root within the group's timeout; the
root's error from the servers reaches every local process; bad torchrun
variables are refused by name, and so are a parameter changed after
registration and a buffer the group cannot carry. Run by run_python_test.sh
with the interpreter psync was built for; bounds its own time and stops its
processes.

Run as `torch_local_test.py local OUT FAULT TIMEOUT_S ARGS...` (LOCAL_RANK etc. in its
environment) it is one local process, saving its weights to OUT."""

import os
import subprocess
import sys
import threading
import unittest
from typing import Callable, Dict, List, Sequence

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

import psync
import psync.torch as pt
from psync_servers import BOUND_S, Servers, free_port
from torch_test_util import weights_of

STEPS = 10
GLOBAL_BATCH = 64
LAST_BATCH = 40       # the last step's: local processes of 16, 16, 8 and 0 samples
LR, MOMENTUM, WD = 0.05, 0.9, 0.01
JOB = [f"--lr={LR}", f"--momentum={MOMENTUM}", f"--weight_decay={WD}", "--optimizer=sgd",
       f"--steps={STEPS}", "--chunk_kb=1", "--pull_timeout_s=60", "--rpc_timeout_s=60",
       "--connect_timeout_s=30", "--peer_timeout_s=60"]
GROUP_TIMEOUT_S = 30  # every local collective's bound
HANG_TIMEOUT_S = 10   # the bound when a local process hangs: the test waits for it

Weights = Dict[str, torch.Tensor]


def net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(),
                               torch.nn.Linear(24, 5))


def global_batch(step: int):
    """Step `step`'s global batch: a function of the step alone."""
    g = torch.Generator().manual_seed(500 + step)
    n = LAST_BATCH if step == STEPS - 1 else GLOBAL_BATCH
    return torch.randn(n, 12, generator=g), torch.randint(0, 5, (n,), generator=g)


def local_main(out: str, fault: str, timeout_s: float, args: Sequence[str]) -> None:
    """One local process: its device's share of every global batch. `fault` is
    `exit@T` (exit at once, no clean-up, as a crash, before step T's collectives),
    `hang@T` (stop there for good, alive: a stuck process), `frozen@V` (the first
    layer's bias frozen, filled with V) or `none`; `timeout_s` bounds its group's
    collectives."""
    kind, _, at = fault.partition("@")
    die_at = int(at) if at else -1
    job = pt.init(list(args))
    local = pt.init_local(job, timeout_s=timeout_s)
    model = net()
    if kind == "frozen":
        model[0].bias.requires_grad_(False)
        model[0].bias.data.fill_(float(at))
    try:
        with pt.LocalOptimizer(model, job, local) as opt:
            first = weights_of(model)
            while opt.step_number < STEPS:
                x, y = global_batch(opt.step_number)
                first_sample = min(opt.device_rank * job.batch_per_device, len(x))
                share = slice(first_sample, min(first_sample + job.batch_per_device, len(x)))
                opt.zero_grad()
                opt.samples = share.stop - share.start  # the job's, but in the last step
                if opt.samples:
                    F.cross_entropy(model(x[share]), y[share]).backward()
                if opt.step_number == die_at and kind == "exit":
                    os._exit(9)
                if opt.step_number == die_at and kind == "hang":
                    threading.Event().wait()  # never set: the test kills this process
                opt.step()
    finally:
        local.close()
    torch.save([first, weights_of(model)], out)


def train_torch(first: Weights) -> Weights:
    """The same steps in one process with torch.optim.SGD on each global batch."""
    model = net()
    model.load_state_dict(first)
    sgd = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    for step in range(STEPS):
        x, y = global_batch(step)
        sgd.zero_grad()
        F.cross_entropy(model(x), y).backward()
        sgd.step()
    return weights_of(model)


class Machines:
    """`workers` machines of `local_size` local processes each, started as
    `script`'s `local` mode (this file's by default) with torchrun's variables
    and a gloo port per machine, `faults` by (worker, local rank); killed if
    still running when the `with` block ends."""

    def __init__(self, args: Sequence[str], workers: int, local_size: int,
                 faults: Dict[tuple, str] = None, timeout_s: float = GROUP_TIMEOUT_S,
                 script: str = __file__) -> None:
        tmp = os.environ["TEST_TMPDIR"]
        self.outs: List[str] = []
        self.logs: List[str] = []
        self.processes: List[subprocess.Popen] = []
        for worker in range(workers):
            port = free_port()
            for local_rank in range(local_size):
                out = os.path.join(tmp, f"w{worker}l{local_rank}.{port}.pt")
                env = dict(os.environ, LOCAL_RANK=str(local_rank), RANK=str(local_rank),
                           LOCAL_WORLD_SIZE=str(local_size), WORLD_SIZE=str(local_size),
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
                fault = (faults or {}).get((worker, local_rank), "none")
                self.outs.append(out)
                self.logs.append(out + ".stderr")
                with open(self.logs[-1], "w") as log:
                    self.processes.append(subprocess.Popen(
                        [sys.executable, script, "local", out, fault, str(timeout_s)] +
                        list(args) + [f"--worker_rank={worker}"], env=env, stderr=log))

    def __enter__(self) -> "Machines":
        return self

    def wait(self, count: int = 0) -> List[tuple]:
        """(exit code, stderr) of the first `count` processes (default: all),
        machine by machine, local rank 0 first."""
        chosen = list(zip(self.processes, self.logs))[:count or len(self.processes)]
        results = []
        for process, log in chosen:
            code = process.wait(timeout=4 * BOUND_S)
            with open(log) as f:
                results.append((code, f.read()))
        return results

    def __exit__(self, *_unused) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.kill()
            p.wait()


class LocalAggregationTest(unittest.TestCase):

    def test_two_machines_of_two_processes_train_as_one_torch_process(self):
        job = JOB + ["--num_workers=2", "--devices=2", "--batch_per_device=16"]
        with Servers(job, count=2) as servers, \
                Machines([servers.flag] + job, workers=2, local_size=2) as machines:
            results = machines.wait()
            self.assertEqual([code for code, _ in results], [0] * 4, results)
        runs = [torch.load(out) for out in machines.outs]
        first, last = runs[0]
        for other_first, other_last in runs[1:]:
            for name in first:
                self.assertTrue(torch.equal(other_first[name], first[name]), name)
                self.assertTrue(torch.equal(other_last[name], last[name]), name)
        want = train_torch(first)
        for name in want:
            err = (last[name] - want[name]).abs().max().item()
            scale = want[name].abs().max().item()
            self.assertLessEqual(err, 1e-5 * scale, f"{name}: off by {err}, largest {scale}")
            self.assertFalse(torch.equal(last[name], first[name]), name)

    def test_a_dead_local_process_fails_its_root_within_the_timeout(self):
        job = JOB + ["--num_workers=1", "--devices=2", "--batch_per_device=8"]
        with Servers(job) as servers, \
                Machines([servers.flag] + job, workers=1, local_size=2,
                         faults={(0, 1): "exit@3"}) as machines:
            (root_code, root_err), (dead_code, _) = machines.wait()
        self.assertEqual((root_code, dead_code), (1, 9))
        # torch 2's traceback lines start with "[rank0]: ", torch 1.13's do not.
        self.assertRegex(root_err, "in step\n.*dist.reduce.*\n(.*\n)*.*RuntimeError: .*"
                                   "(Connection reset|Connection closed)")

    def test_a_stuck_local_process_fails_its_root_after_the_groups_timeout(self):
        job = JOB + ["--num_workers=1", "--devices=2", "--batch_per_device=8"]
        with Servers(job) as servers, \
                Machines([servers.flag] + job, workers=1, local_size=2,
                         faults={(0, 1): "hang@3"}, timeout_s=HANG_TIMEOUT_S) as machines:
            [(root_code, root_err)] = machines.wait(count=1)
            self.assertIsNone(machines.processes[1].poll())  # still stuck, alive
        self.assertEqual(root_code, 1)
        self.assertRegex(root_err, "in step\n.*dist.reduce.*\n(.*\n)*.*RuntimeError: .*"
                                   f"Timed out waiting {HANG_TIMEOUT_S * 1000}ms")

    def test_local_processes_with_other_frozen_parameters_are_refused(self):
        job = JOB + ["--num_workers=1", "--devices=2", "--batch_per_device=8"]
        with Servers(job) as servers, \
                Machines([servers.flag] + job, workers=1, local_size=2,
                         faults={(0, 0): "frozen@0", (0, 1): "frozen@1"}) as machines:
            (root_code, root_err), (other_code, other_err) = machines.wait()
        self.assertEqual((root_code, other_code), (1, 1))
        self.assertRegex(other_err, "ValueError: LocalOptimizer: local rank 1's frozen parameter "
                                    "'0.bias' holds other values than the local root's: frozen "
                                    "parameters \\(requires_grad=False\\) are neither trained "
                                    "nor broadcast")
        self.assertRegex(root_err, "ValueError: LocalOptimizer: local rank 1's frozen parameters "
                                   "are not the local root's")

    def test_the_roots_error_from_the_servers_reaches_every_local_process(self):
        job = JOB + ["--num_workers=1", "--devices=2", "--batch_per_device=8"]
        with Servers(job + ["--init_from=worker"]) as servers, \
                Machines([servers.flag] + job + ["--init_from=seed"], workers=1,
                         local_size=2) as machines:
            (root_code, root_err), (other_code, other_err) = machines.wait()
        self.assertEqual((root_code, other_code), (1, 1))
        self.assertRegex(root_err, "psync.Error: .*--init_from")
        self.assertRegex(other_err, "psync.Error: worker 0's local root \\(local rank 0\\) "
                                    "failed registering: Error: .*--init_from")


class LocalOptimizerChecksTest(unittest.TestCase):
    """LocalOptimizer refuses a buffer its group cannot carry, and a step whose
    model's parameters changed since it registered them, as DistributedOptimizer
    does (one check, optimizer.py): one machine of one local process, this
    test's own."""

    def test_parameters_added_removed_replaced_or_resized(self):
        self.on_one_process([], self.check_refusals)

    def test_backward_passes_other_than_accumulation_steps(self):
        self.on_one_process(["--accumulation_steps=2"], self.check_passes)

    def on_one_process(self, flags: List[str],
                       check: Callable[[pt.Job, pt.LocalGroup], None]) -> None:
        job_flags = JOB + ["--num_workers=1", "--devices=1", "--batch_per_device=8"] + flags
        env = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(free_port())}
        with Servers(job_flags) as servers:
            job = pt.init([servers.flag] + job_flags + ["--worker_rank=0"])
            local = pt.init_local(job, timeout_s=GROUP_TIMEOUT_S, env=env)
            try:
                check(job, local)
            finally:
                local.close()

    def check_passes(self, job: pt.Job, local: pt.LocalGroup) -> None:
        model = net()
        opt = pt.LocalOptimizer(model, job, local)
        x, y = global_batch(0)

        def backward() -> None:
            F.cross_entropy(model(x[:8]), y[:8]).backward()

        with self.assertRaisesRegex(pt.StepWithoutBackwardError,
                                    "step\\(\\) for step 0 on local rank 0 without a backward"):
            opt.step()
        backward()
        with self.assertRaisesRegex(pt.TooFewBackwardPassesError,
                                    "step\\(\\) for step 0 on local rank 0 after 1 backward "
                                    "pass\\(es\\), expected 2 \\(--accumulation_steps\\)"):
            opt.step()
        backward()
        backward()
        with self.assertRaisesRegex(pt.TooManyBackwardPassesError,
                                    "after 3 backward passes, expected 2"):
            opt.step()
        self.assertEqual(opt.step_number, 0)  # nothing was sent
        opt.zero_grad()
        backward()
        backward()
        opt.step()
        self.assertEqual(opt.step_number, 1)
        with self.assertRaisesRegex(pt.StepWithoutBackwardError, "for step 1"):
            opt.step()  # the gradients left from step 0 are not a pass of step 1
        def checkpointed() -> None:  # a reentrant segment's own backward is not a pass
            h = torch.utils.checkpoint.checkpoint(model[0], x[:8].requires_grad_())
            F.cross_entropy(torch.utils.checkpoint.checkpoint(model[2], model[1](h)),
                            y[:8]).backward()

        checkpointed()
        with self.assertRaisesRegex(pt.TooFewBackwardPassesError, "after 1 backward pass"):
            opt.step()
        h = model[0](x[:8])
        h.register_hook(lambda _: (_ for _ in ()).throw(RuntimeError("out of memory")))
        with self.assertRaisesRegex(RuntimeError, "out of memory"):
            F.cross_entropy(model[2](model[1](h)), y[:8]).backward()  # counts for nothing
        with self.assertRaisesRegex(pt.OptimizerError,
                                    "step\\(\\) for step 1 on local rank 0 after a backward pass "
                                    "that raised \\(RuntimeError: out of memory\\) having reached "
                                    "some parameters, whose gradients are now partial: call "
                                    "opt.zero_grad\\(\\)"):
            opt.step()  # its gradients hold part of the raised pass
        opt.zero_grad()  # the step starts again, its count not stuck on the raised pass
        checkpointed()
        checkpointed()
        opt.step()
        self.assertEqual(opt.step_number, 2)
        opt.client.cancel()
        opt.close()

    def test_a_buffer_the_group_cannot_carry(self):
        model = net()
        model[0].register_buffer("counts", torch.zeros(4).to_sparse())
        job = pt.init(["--servers=127.0.0.1:1", "--devices=1"])
        with self.assertRaisesRegex(TypeError, "LocalOptimizer: buffer '0.counts' is a "
                                               "torch.sparse_coo tensor, expected a dense one"):
            pt.LocalOptimizer(model, job, pt.LocalGroup(rank=0, size=1, timeout_s=1))

    def check_refusals(self, job: pt.Job, local: pt.LocalGroup) -> None:
        model = net()
        opt = pt.LocalOptimizer(model, job, local)
        x, y = global_batch(0)

        def backward() -> None:
            opt.zero_grad()
            F.cross_entropy(model(x[:8]), y[:8]).backward()

        def refused(pattern: str) -> None:
            with self.assertRaisesRegex(pt.ParametersChangedError, pattern):
                opt.step()
            self.assertEqual(opt.step_number, 0)

        backward()
        weight, bias = model[0].weight, model[2].bias
        model[0].weight = torch.nn.Parameter(weight.detach().clone())
        refused("parameter '0.weight' was replaced by another tensor after LocalOptimizer "
                "registered it; change its values in place")
        model[0].weight = weight
        model[2].extra = torch.nn.Parameter(torch.zeros(3))
        refused("parameter '2.extra' was added after LocalOptimizer registered the model; "
                "build the model completely before LocalOptimizer")
        del model[2].extra
        bias.requires_grad_(False)
        refused(r"parameter '2.bias' was removed \(or stopped requiring a gradient\) after "
                "LocalOptimizer registered it")
        bias.requires_grad_(True)
        values = bias.data
        bias.data = torch.zeros(7)
        refused(r"parameter '2.bias' has shape \[7\], registered with \[5\]")
        bias.data = values
        backward()  # the model as registered again: the step goes through
        opt.step()
        self.assertEqual(opt.step_number, 1)
        opt.client.cancel()


class InitLocalTest(unittest.TestCase):
    """Variables refused before any group is made."""

    JOB = pt.init(["--servers=127.0.0.1:1", "--devices=2"])
    ENV = {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "1"}

    def refused(self, pattern: str, timeout_s: float = 10, **change) -> None:
        env = {k: v for k, v in dict(self.ENV, **change).items() if v is not None}
        with self.assertRaisesRegex(ValueError, pattern):
            pt.init_local(self.JOB, timeout_s=timeout_s, env=env)

    def test_bad_variables(self):
        self.refused(r"\$LOCAL_RANK is not set, expected it from torchrun", LOCAL_RANK=None)
        self.refused(r"\$LOCAL_RANK is 'x', expected an integer >= 0", LOCAL_RANK="x")
        self.refused(r"\$LOCAL_RANK is 2, expected < \$LOCAL_WORLD_SIZE \(2\)", LOCAL_RANK="2")
        self.refused(r"\$LOCAL_WORLD_SIZE is 3 but the job has --devices=2",
                     LOCAL_WORLD_SIZE="3", LOCAL_RANK="0")
        self.refused(r"\$WORLD_SIZE is 4, \$LOCAL_WORLD_SIZE 2: run one torchrun per machine",
                     WORLD_SIZE="4")
        self.refused(r"\$WORLD_SIZE is 'two', expected an integer >= 1", WORLD_SIZE="two")
        self.refused(r"\$MASTER_PORT is '0', expected an integer >= 1", MASTER_PORT="0")
        self.refused(r"timeout_s is 0, expected > 0", timeout_s=0)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "local":
        local_main(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5:])
    else:
        unittest.main(verbosity=2)
