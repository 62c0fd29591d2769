"""psync.torch.DistributedOptimizer against real psync_server processes:
one worker and two worker processes train an MLP with SGD (momentum, weight
decay) exactly as single-process torch.optim.SGD does on the global batch;
gradient accumulation equals the doubled batch; with --init_from=worker every
worker starts from worker 0's model; pushes start inside backward;
each misuse raises its named error; examples/torch/train_mlp.py trains. Run by run_python_test.sh with the
interpreter psync was built for; bounds its own time and stops its servers.

Run as `torch_optimizer_test.py worker RANK SERVERS OUT` it is one worker of
the two-worker test (a process of its own), saving its weights to OUT."""

import os
import subprocess
import sys
import time
import unittest
from typing import Dict, List, Sequence

import torch
import torch.nn.functional as F

import psync
import psync.torch as pt
from psync_servers import BOUND_S, Servers

STEPS = 10
BATCH = 32           # the global batch; a power of two, like the sample counts
LAST_BATCH = 16      # the last step's (partial) global batch
LR, MOMENTUM, WD = 0.05, 0.9, 0.01
JOB = [f"--lr={LR}", f"--momentum={MOMENTUM}", f"--weight_decay={WD}", "--optimizer=sgd",
       f"--steps={STEPS}", "--chunk_kb=1", "--pull_timeout_s=60", "--rpc_timeout_s=60",
       "--connect_timeout_s=30", "--peer_timeout_s=60"]
RTOL = 1e-5

Weights = Dict[str, torch.Tensor]


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
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def train_worker(args: Sequence[str], rank: int, num_workers: int,
                 micro_batches: int = 1) -> List[Weights]:
    """Trains an Mlp through psync as worker `rank` of `num_workers`, on its
    share of every global batch (cut in `micro_batches` backward passes);
    returns its weights after registering and at the end."""
    job = pt.init(list(args) + [f"--worker_rank={rank}"])
    model = Mlp()
    with pt.DistributedOptimizer(model, job) as opt:
        first = weights_of(model)
        while opt.step_number < STEPS:
            x, y = batch(opt.step_number)
            share = len(x) // num_workers
            x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
            opt.zero_grad()
            opt.samples = share // micro_batches  # the job's batch but for the last step
            for k in range(micro_batches):
                part = slice(k * opt.samples, (k + 1) * opt.samples)
                F.cross_entropy(model(x[part]), y[part]).backward()
            opt.step()
    return [first, weights_of(model)]


def train_torch(first: Weights) -> Weights:
    """The same steps in one process with torch.optim.SGD on each global batch.
    The parameter forward never uses gets a zero gradient, psync's rule."""
    model = Mlp()
    model.load_state_dict(first)
    sgd = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    for step in range(STEPS):
        x, y = batch(step)
        sgd.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        sgd.step()
    return weights_of(model)


class EquivalenceTest(unittest.TestCase):

    def assert_same_weights(self, got: Weights, want: Weights, first: Weights) -> None:
        self.assertEqual(list(got), list(want))
        for name in want:
            err = (got[name] - want[name]).abs().max().item()
            scale = want[name].abs().max().item()
            self.assertLessEqual(err, RTOL * scale, f"{name}: off by {err}, largest {scale}")
        # Training moved every weight (the spare layer's by weight decay alone).
        self.assertFalse(torch.equal(got["fc1.weight"], first["fc1.weight"]))
        self.assertFalse(torch.equal(got["spare.weight"], first["spare.weight"]))

    def test_one_worker_trains_as_torch_optim_sgd(self):
        with Servers(JOB + ["--num_workers=1", "--batch_per_device=32"]) as servers:
            first, last = train_worker([servers.flag] + JOB + ["--num_workers=1",
                                                               "--batch_per_device=32"], 0, 1)
        self.assert_same_weights(last, train_torch(first), first)

    def test_accumulation_pushes_once_per_step_as_the_doubled_batch(self):
        job = JOB + ["--num_workers=1", "--batch_per_device=16", "--accumulation_steps=2"]
        with Servers(job) as servers:
            first, last = train_worker([servers.flag] + job, 0, 1, micro_batches=2)
        self.assert_same_weights(last, train_torch(first), first)

    def test_two_worker_processes_train_as_one_on_the_whole_batch(self):
        job = JOB + ["--num_workers=2", "--batch_per_device=16"]
        tmp = os.environ["TEST_TMPDIR"]
        with Servers(job, count=2) as servers:
            outs = [os.path.join(tmp, f"worker{r}.pt") for r in range(2)]
            workers = [subprocess.Popen([sys.executable, __file__, "worker", str(r),
                                         servers.flag, outs[r]]) for r in range(2)]
            try:
                codes = [w.wait(timeout=4 * BOUND_S) for w in workers]
            finally:
                for w in workers:
                    if w.poll() is None:
                        w.kill()
                        w.wait()
        self.assertEqual(codes, [0, 0])
        (first0, last0), (first1, last1) = [torch.load(o) for o in outs]
        for name in first0:
            self.assertTrue(torch.equal(first0[name], first1[name]), name)
            self.assertTrue(torch.equal(last0[name], last1[name]), name)
        self.assert_same_weights(last0, train_torch(first0), first0)


class InitialWeightsTest(unittest.TestCase):
    """--init_from=worker: worker 0's model is every worker's starting point."""

    JOB = JOB + ["--num_workers=2", "--batch_per_device=16", "--init_from=worker"]

    def optimizer(self, servers: Servers, model: torch.nn.Module, rank: int,
                  extra: Sequence[str] = ()) -> pt.DistributedOptimizer:
        args = [servers.flag] + self.JOB + [f"--worker_rank={rank}"] + list(extra)
        return pt.DistributedOptimizer(model, pt.init(args))

    def test_worker_0s_values_become_the_servers_initial_weights(self):
        with Servers(self.JOB, count=2) as servers:
            torch.manual_seed(1)
            model0 = Mlp()
            own0 = {n: p.detach().clone() for n, p in model0.named_parameters()}
            torch.manual_seed(2)
            model1 = Mlp()  # other values, which the servers' must replace
            self.assertFalse(torch.equal(model1.fc1.weight, model0.fc1.weight))
            opt0 = self.optimizer(servers, model0, 0)
            opt1 = self.optimizer(servers, model1, 1)
            try:
                self.assertEqual((opt0.step_number, opt1.step_number), (0, 0))
                for model in (model0, model1):
                    for n, p in model.named_parameters():
                        self.assertTrue(torch.equal(p.detach(), own0[n]), n)
            finally:
                for opt in (opt0, opt1):
                    opt.client.cancel()
                    opt.close()

    def test_a_worker_of_another_init_from_is_refused_naming_both(self):
        with Servers(self.JOB, count=2) as servers:
            with self.assertRaisesRegex(psync.Error,
                                        "from the seed, server 0 from the worker.*--init_from"):
                self.optimizer(servers, Mlp(), 0, ["--init_from=seed"])


class OverlapTest(unittest.TestCase):

    def test_pushes_start_inside_backward_and_are_answered_without_step(self):
        job = JOB + ["--num_workers=1", "--batch_per_device=32"]
        with Servers(job) as servers:
            answered = 'psync_server_requests_total{method="PushPull",code="OK"}'
            model = Mlp()
            opt = pt.DistributedOptimizer(model, pt.init([servers.flag] + job))
            seen = {}

            def on_fc1_output_gradient(_grad):
                # Backward has reached fc1's output: fc3's and fc2's gradients are
                # accumulated (their nodes run first), fc1's not yet computed.
                seen["in_flight"] = opt.in_flight

            model.on_hidden = lambda h: h.register_hook(on_fc1_output_gradient)
            x, y = batch(0)
            F.cross_entropy(model(x), y).backward()
            self.assertEqual(seen["in_flight"], ["fc2.weight", "fc2.bias", "fc3.weight",
                                                 "fc3.bias"])
            self.assertEqual(opt.in_flight, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                             "fc3.weight", "fc3.bias"])
            # The pushes travel on their own: the server answers them before step()
            # waits (only `spare`, which no backward reached, is left for step()).
            deadline = time.monotonic() + BOUND_S
            while servers.metric(0, answered) < 1:
                self.assertLess(time.monotonic(), deadline, "no push-pull answered before step()")
                time.sleep(0.01)
            opt.step()
            self.assertEqual(opt.step_number, 1)
            opt.finish()


class ErrorTest(unittest.TestCase):
    """Each misuse, against servers of its own (a model of its own)."""

    JOB = JOB + ["--num_workers=1", "--batch_per_device=4"]

    def optimizer(self, servers: Servers, model: torch.nn.Module) -> pt.DistributedOptimizer:
        return pt.DistributedOptimizer(model, pt.init([servers.flag] + self.JOB))

    def backward(self, model: torch.nn.Module) -> None:
        F.cross_entropy(model(torch.randn(4, 20)), torch.tensor([0, 1, 2, 3])).backward()

    def test_step_without_backward(self):
        with Servers(self.JOB) as servers:
            opt = self.optimizer(servers, Mlp())
            with self.assertRaisesRegex(pt.StepWithoutBackwardError,
                                        "step\\(\\) for step 0 without a backward pass"):
                opt.step()

    def test_a_second_backward_after_the_push(self):
        with Servers(self.JOB) as servers:
            model = Mlp()
            opt = self.optimizer(servers, model)
            self.backward(model)
            with self.assertRaisesRegex(pt.BackwardAfterPushError,
                                        "parameter 'fc3.bias' got a gradient after its push "
                                        "for step 0: call step\\(\\) after every 1 backward"):
                self.backward(model)
            opt.step()  # the first backward's step goes through
            self.assertEqual(opt.step_number, 1)

    def test_sparse_gradients(self):

        class Bag(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(20, 4, sparse=True)

            def forward(self, x):
                return self.emb(x.abs().long() % 20).sum(1)

        with Servers(self.JOB) as servers:
            model = Bag()
            self.optimizer(servers, model)
            with self.assertRaisesRegex(pt.SparseGradientError,
                                        "parameter 'emb.weight' has a sparse gradient"):
                self.backward(model)

    def test_parameters_added_replaced_or_resized(self):
        with Servers(self.JOB) as servers:
            model = Mlp()
            self.optimizer(servers, model)
            model.extra = torch.nn.Linear(2, 2)
            with self.assertRaisesRegex(pt.ParametersChangedError,
                                        "parameter 'extra.weight' was added"):
                self.backward(model)
            del model.extra
            model.fc2.bias = torch.nn.Parameter(model.fc2.bias.detach().clone())
            with self.assertRaisesRegex(pt.ParametersChangedError,
                                        "parameter 'fc2.bias' was replaced"):
                self.backward(model)

    def test_a_resized_parameter(self):
        with Servers(self.JOB) as servers:
            model = Mlp()
            self.optimizer(servers, model)
            model.spare.bias.data = torch.zeros(5)
            with self.assertRaisesRegex(pt.ParametersChangedError,
                                        r"parameter 'spare.bias' has shape \[5\], registered "
                                        r"with \[4\]"):
                self.backward(model)

    def test_samples_after_backward_and_bad_parameters(self):
        with Servers(self.JOB) as servers:
            model = Mlp()
            opt = self.optimizer(servers, model)
            with self.assertRaisesRegex(ValueError, "samples is 0, expected an int >= 1"):
                opt.samples = 0
            self.backward(model)
            with self.assertRaisesRegex(pt.OptimizerError, "samples set to 2 after step 0's "
                                                           "backward began"):
                opt.samples = 2
        job = pt.init(["--servers=127.0.0.1:1"])
        with self.assertRaisesRegex(TypeError, "parameter 'weight' is torch.float64"):
            pt.DistributedOptimizer(torch.nn.Linear(2, 2).double(), job)
        with self.assertRaisesRegex(psync.InvalidArgumentError, "--frobnicate: no such job flag"):
            pt.init(["--servers=127.0.0.1:1", "--frobnicate=1"])


class ExampleTest(unittest.TestCase):

    def test_train_mlp_trains_on_fashion_mnist_and_reports_its_accuracy(self):
        job = ["--num_workers=1", "--batch_per_device=64", "--steps=30", "--lr=0.1"]
        script = os.path.join(os.environ["TEST_SRCDIR"], "psync/examples/torch/train_mlp.py")
        with Servers(job) as servers:
            r = subprocess.run([sys.executable, script, "--hidden=64", servers.flag] + job,
                               capture_output=True, text=True, timeout=4 * BOUND_S)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("worker 0 of 1: 30 steps of 64 samples from step 0", r.stdout)
        accuracy = float(r.stdout.split("test accuracy ")[1].split()[0])
        self.assertGreater(accuracy, 0.5, r.stdout)  # 10 classes: chance is 0.1


def worker_main(rank: int, servers_flag: str, out: str) -> None:
    job = [servers_flag] + JOB + ["--num_workers=2", "--batch_per_device=16"]
    torch.save(train_worker(job, rank, 2), out)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "worker":
        worker_main(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        unittest.main(verbosity=2)
