"""psync.torch.DistributedOptimizer against real psync_server processes:
one worker and two worker processes train an MLP exactly as single-process
torch.optim does on the global batch (SGD with momentum and weight decay,
Nesterov, Adam, AdamW); gradient accumulation equals the doubled batch, and
so do passes of unequal sizes with step_samples;
deterministic mode gives the same bits on a rerun; with --init_from=worker,
or init_from left out, every worker starts from worker 0's model; pushes start inside backward;
each misuse raises its named error; examples/torch/train_mlp.py and
train_cnn.py train. Run by run_python_test.sh with the interpreter psync was
built for; bounds its own time and stops its servers."""

import gc
import json
import os
import re
import subprocess
import sys
import time
import unittest
from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

import psync
import psync.torch as pt
from psync_servers import BOUND_S, Servers
from torch_test_util import (ADAM, ADAMW, BASE_JOB, RTOL, SGD_MOMENTUM, SGD_NESTEROV, Mlp,
                             STEPS, Settings, Weights, batch, job_flags, train_torch,
                             train_worker, train_worker_processes, weights_of)

JOB = BASE_JOB + job_flags(SGD_MOMENTUM)


class Equivalence:
    """Training through psync equals torch.optim on the global batch for
    SETTINGS, the optimizer of a subclass (a TestCase)."""

    SETTINGS: Settings = {}

    def job(self, num_workers: int, batch_per_device: int) -> List[str]:
        return BASE_JOB + job_flags(self.SETTINGS) + [f"--num_workers={num_workers}",
                                                      f"--batch_per_device={batch_per_device}"]

    def assert_same_weights(self, got: Weights, want: Weights, first: Weights) -> None:
        self.assertEqual(list(got), list(want))
        for name in want:
            err = (got[name] - want[name]).abs().max().item()
            scale = want[name].abs().max().item()
            self.assertLessEqual(err, RTOL * scale, f"{name}: off by {err}, largest {scale}")
        # Training moved every weight (the spare layer's by weight decay alone).
        self.assertFalse(torch.equal(got["fc1.weight"], first["fc1.weight"]))
        self.assertFalse(torch.equal(got["spare.weight"], first["spare.weight"]))

    def two_worker_processes(self, job: Sequence[str]) -> List[Weights]:
        """Trains with two worker processes on two servers; checks that both
        end with the same weights and returns worker 0's first and last."""
        with Servers(job, count=2) as servers:
            (first0, last0), (first1, last1) = train_worker_processes(
                [servers.flag] + list(job), 2, os.environ["TEST_TMPDIR"])
        for name in first0:
            self.assertTrue(torch.equal(first0[name], first1[name]), name)
            self.assertTrue(torch.equal(last0[name], last1[name]), name)
        return [first0, last0]

    def test_one_worker_trains_as_torch_optim(self):
        job = self.job(1, 32)
        with Servers(job) as servers:
            first, last = train_worker([servers.flag] + job, 0, 1)
        self.assert_same_weights(last, train_torch(first, self.SETTINGS), first)

    def test_two_worker_processes_train_as_one_on_the_whole_batch(self):
        first, last = self.two_worker_processes(self.job(2, 16))
        self.assert_same_weights(last, train_torch(first, self.SETTINGS), first)


class SgdMomentumTest(Equivalence, unittest.TestCase):
    SETTINGS = SGD_MOMENTUM

    def test_accumulation_pushes_once_per_step_as_the_doubled_batch(self):
        job = self.job(1, 16) + ["--accumulation_steps=2"]
        with Servers(job) as servers:
            first, last = train_worker([servers.flag] + job, 0, 1, micro_batches=2)
        self.assert_same_weights(last, train_torch(first, self.SETTINGS), first)

    def test_passes_of_unequal_sizes_count_the_whole_share(self):
        # The example's train_step cuts 32 samples into passes of 10, 11 and 11
        # (the last step's 16 into 5, 5, 6): opt.step_samples sends 32, and each
        # pass's loss is weighted by its samples over 11, as an elastic share
        # that --accumulation_steps does not divide is trained.
        sys.path.insert(0, os.path.join(os.environ["TEST_SRCDIR"], "psync/examples/torch"))
        import fashion_mnist  # pylint: disable=import-outside-toplevel
        job = self.job(1, 11) + ["--accumulation_steps=3"]
        model = Mlp()
        with Servers(job) as servers:
            with pt.DistributedOptimizer(model, pt.init([servers.flag] + job)) as opt:
                first = weights_of(model)
                while opt.step_number < STEPS:
                    x, y = batch(opt.step_number)
                    fashion_mnist.train_step(opt, model, x, y)
        self.assert_same_weights(weights_of(model), train_torch(first, self.SETTINGS), first)


class SgdNesterovTest(Equivalence, unittest.TestCase):
    SETTINGS = SGD_NESTEROV


class AdamTest(Equivalence, unittest.TestCase):
    SETTINGS = ADAM


class AdamWTest(Equivalence, unittest.TestCase):
    SETTINGS = ADAMW

    def test_deterministic_reruns_give_the_same_bits(self):
        job = self.job(2, 16) + ["--deterministic"]
        first_a, last_a = self.two_worker_processes(job)
        first_b, last_b = self.two_worker_processes(job)
        for name in last_a:
            self.assertTrue(torch.equal(first_a[name], first_b[name]), name)
            self.assertTrue(torch.equal(last_a[name], last_b[name]), name)
        self.assertFalse(torch.equal(last_a["fc1.weight"], first_a["fc1.weight"]))


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

    def test_a_restarted_worker_0_with_other_values_takes_the_jobs(self):
        with Servers(self.JOB, count=2) as servers:
            torch.manual_seed(1)
            first = Mlp()
            sent = {n: p.detach().clone() for n, p in first.named_parameters()}
            opt = self.optimizer(servers, first, 0)
            opt.client.cancel()  # worker 0 dies before the first step: its connections
            opt.close()          # close with its client, and the rank is free at once
            del opt
            gc.collect()
            torch.manual_seed(2)  # its restart builds other values
            again = Mlp()
            opt = self.optimizer(servers, again, 0)
            try:
                for n, p in again.named_parameters():
                    self.assertTrue(torch.equal(p.detach(), sent[n]), n)
            finally:
                opt.client.cancel()
                opt.close()


class DefaultInitialWeightsTest(InitialWeightsTest):
    """--init_from left out: torch workers start from worker 0's model, as DDP
    starts from rank 0's (the seed's values would replace it, and start every
    BatchNorm weight at 0)."""

    JOB = JOB + ["--num_workers=2", "--batch_per_device=16"]

    def test_a_worker_of_another_init_from_is_refused_naming_both(self):
        with Servers(self.JOB, count=2) as servers:
            opt0 = self.optimizer(servers, Mlp(), 0)
            try:
                self.assertEqual(opt0.job.init_from, "worker")
                with self.assertRaisesRegex(
                        psync.Error, "worker 1 takes its initial weights from the seed, server 0 "
                        "from the worker \\(set by worker 0's registration.*--init_from"):
                    self.optimizer(servers, Mlp(), 1, ["--init_from=seed"])
            finally:
                opt0.client.cancel()
                opt0.close()

    def test_frozen_parameters_must_be_worker_0s(self):
        models = []
        for seed in (1, 2):
            torch.manual_seed(seed)
            models.append(Mlp())
            models[-1].fc2.requires_grad_(False)  # frozen: neither trained nor sent
        with Servers(self.JOB, count=2) as servers:
            opt0 = self.optimizer(servers, models[0], 0)
            try:
                with self.assertRaisesRegex(
                        psync.Error, "worker 1's frozen parameter 'fc2.weight' holds other values, "
                        "dtype or shape \\(SHA-256 [0-9a-f]{12}\\.\\.\\. against the job's "
                        "[0-9a-f]{12}\\.\\.\\.\\), fixed by worker 0's registration from .*: "
                        "frozen parameters \\(requires_grad=False\\) are neither trained nor "
                        "sent"):
                    self.optimizer(servers, models[1], 1)
                models[1].fc2.load_state_dict(models[0].fc2.state_dict())
                opt1 = self.optimizer(servers, models[1], 1)  # built alike: it joins
                opt1.client.cancel()
                opt1.close()
            finally:
                opt0.client.cancel()
                opt0.close()

    def test_a_batchnorm_keeps_its_own_initial_weights(self):
        with Servers(self.JOB, count=2) as servers:
            models = [torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
                      for _ in range(2)]
            opts = [self.optimizer(servers, m, rank) for rank, m in enumerate(models)]
            try:
                for m in models:
                    self.assertTrue(torch.equal(m[1].weight.detach(), torch.ones(4)))
                    self.assertTrue(torch.equal(m[0].weight, models[0][0].weight))
            finally:
                for opt in opts:
                    opt.client.cancel()
                    opt.close()


def backward_of_step_0(servers: Servers, job: List[str]):
    """An optimizer of an Mlp through `servers` after step 0's backward, and what
    was in flight when backward reached fc1's output (fc3's and fc2's gradients
    accumulated, their nodes running first; fc1's not yet computed)."""
    model = Mlp()
    opt = pt.DistributedOptimizer(model, pt.init([servers.flag] + job))
    seen = {}

    def on_fc1_output_gradient(_grad):
        seen["in_flight"] = opt.in_flight

    model.on_hidden = lambda h: h.register_hook(on_fc1_output_gradient)
    x, y = batch(0)
    F.cross_entropy(model(x), y).backward()
    return opt, seen["in_flight"]


class OverlapTest(unittest.TestCase):

    def test_pushes_start_inside_backward_and_are_answered_without_step(self):
        job = JOB + ["--num_workers=1", "--batch_per_device=32", "--overlap_min_kb=0"]
        with Servers(job) as servers:
            answered = 'psync_server_requests_total{method="PushPull",code="OK"}'
            opt, at_fc1 = backward_of_step_0(servers, job)
            self.assertEqual(at_fc1, ["fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"])
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

    def test_runs_are_held_until_they_reach_overlap_min_kb(self):
        # fc2 and fc3 hold 2.1 KiB of gradients, fc1 2.6 KiB: with a 2 KiB
        # floor fc3+fc2 go out together, fc1's run on its own; without overlap
        # nothing goes out before step().
        for flags, want in ((["--overlap_min_kb=2"], [["fc2.weight", "fc2.bias", "fc3.weight",
                                                        "fc3.bias"], 6]),
                            (["--nooverlap"], [[], 0])):
            job = JOB + ["--num_workers=1", "--batch_per_device=32"] + flags
            with Servers(job) as servers:
                opt, at_fc1 = backward_of_step_0(servers, job)
                self.assertEqual([at_fc1, len(opt.in_flight)], want, flags)
                opt.step()
                self.assertEqual(opt.step_number, 1)
                opt.finish()


class DropTest(unittest.TestCase):

    def test_an_optimizer_dropped_with_pushes_in_flight_cancels_them(self):
        # Worker 1 never comes, so worker 0's pushes wait for it (up to the 60 s
        # --rpc_timeout_s); dropping the optimizer must not wait for them.
        job = JOB + ["--num_workers=2", "--batch_per_device=16", "--overlap_min_kb=0"]
        with Servers(job) as servers:
            model = Mlp()
            opt = pt.DistributedOptimizer(model, pt.init([servers.flag] + job + ["--worker_rank=0"]))
            x, y = batch(0)
            F.cross_entropy(model(x[:16]), y[:16]).backward()
            self.assertTrue(opt.in_flight)
            start = time.monotonic()
            del opt
            gc.collect()  # the optimizer and its hooks refer to each other
            self.assertLess(time.monotonic() - start, 20, "the dropped client waited for its calls")


class ErrorTest(unittest.TestCase):
    """Each misuse, against servers of its own (a model of its own)."""

    JOB = JOB + ["--num_workers=1", "--batch_per_device=4"]
    TWO_PASSES = JOB + ["--accumulation_steps=2"]

    def optimizer(self, servers: Servers, model: torch.nn.Module,
                  *flags: str) -> pt.DistributedOptimizer:
        """An optimizer (of the job with `flags` added) kept alive until the test
        ends, then cancelled and closed: one only its hooks refer to is garbage
        (its hooks go when the collector runs)."""
        opt = pt.DistributedOptimizer(model, pt.init([servers.flag] + self.JOB + list(flags)))
        self.addCleanup(opt.close)
        self.addCleanup(opt.client.cancel)
        return opt

    def backward(self, model: torch.nn.Module) -> None:
        F.cross_entropy(model(torch.randn(4, 20)), torch.tensor([0, 1, 2, 3])).backward()

    def test_step_without_backward(self):
        with Servers(self.JOB) as servers:
            opt = self.optimizer(servers, Mlp())
            with self.assertRaisesRegex(pt.StepWithoutBackwardError,
                                        "step\\(\\) for step 0 without a backward pass"):
                opt.step()

    def test_a_worker_of_another_wire_dtype_is_refused(self):
        with Servers(self.JOB) as servers:
            with self.assertRaisesRegex(psync.Error, "worker 0 sends gradients and weights as "
                                        "bf16, server 0's job says float32"):
                pt.DistributedOptimizer(Mlp(), pt.init([servers.flag] + self.JOB +
                                                       ["--wire_dtype=bf16"]))

    def two_pass_optimizer(self, servers: Servers) -> Tuple[Mlp, pt.DistributedOptimizer]:
        """An optimizer of --accumulation_steps=2 (TWO_PASSES), closed after the test."""
        model = Mlp()
        opt = pt.DistributedOptimizer(model, pt.init([servers.flag] + self.TWO_PASSES))
        self.addCleanup(opt.close)
        self.addCleanup(opt.client.cancel)
        return model, opt

    def test_fewer_backward_passes_than_accumulation_steps(self):
        with Servers(self.TWO_PASSES) as servers:
            model, opt = self.two_pass_optimizer(servers)
            self.backward(model)
            with self.assertRaisesRegex(pt.TooFewBackwardPassesError,
                                        "step\\(\\) for step 0 after 1 backward pass\\(es\\), "
                                        "expected 2 \\(--accumulation_steps\\)"):
                opt.step()
            self.assertEqual(opt.in_flight, [])  # nothing was sent
            self.backward(model)  # the second pass: the step goes on
            opt.step()
            self.assertEqual(opt.step_number, 1)

    def test_a_second_backward_after_the_push(self):
        with Servers(self.JOB) as servers:
            model = Mlp()
            opt = self.optimizer(servers, model)
            self.backward(model)
            with self.assertRaisesRegex(pt.BackwardAfterPushError,
                                        "parameter 'fc3.bias' got a gradient in a backward pass "
                                        "beyond step 0's 1: call step\\(\\) after every 1 "
                                        "backward.*; this pass added to its gradient, not yet "
                                        "pushed, so call opt.zero_grad\\(\\) and run the step's "
                                        "passes again"):
                self.backward(model)
            # fc3.bias, held for its push, got the second pass's gradient too:
            # the step cannot go on from it, but can start again.
            with self.assertRaisesRegex(pt.OptimizerError,
                                        "a backward pass of step 0 raised \\(BackwardAfterPushError: "
                                        "parameter 'fc3.bias' got a gradient .*\\) after reaching "
                                        "some parameters, whose gradients are now partial; nothing "
                                        "was pushed: call opt.zero_grad\\(\\) \\(the optimizer's, "
                                        "not the model's\\) before step"):
                opt.step()
            opt.zero_grad()
            self.backward(model)
            opt.step()
            self.assertEqual(opt.step_number, 1)
        with Servers(self.JOB) as servers:
            model = Mlp()
            opt = self.optimizer(servers, model, "--overlap_min_kb=0")
            self.backward(model)
            self.assertIn("fc3.bias", opt.in_flight)
            with self.assertRaisesRegex(pt.BackwardAfterPushError,
                                        "parameter 'fc3.bias' got a gradient after its push for "
                                        "step 0 started: .*; this pass counts for nothing"):
                self.backward(model)
            opt.step()  # fc3.bias was pushed before the second pass: the step goes through
            self.assertEqual(opt.step_number, 1)

    def test_a_backward_that_raised_after_a_push_started_loses_the_step(self):
        x, y = torch.randn(4, 20), torch.tensor([0, 1, 2, 3])

        def clean_step(opt: pt.DistributedOptimizer, model: Mlp) -> None:
            F.cross_entropy(model(x), y).backward()
            opt.step()

        weights = []
        for lose in (False, True):
            with Servers(self.JOB) as servers:
                torch.manual_seed(3)
                model = Mlp()
                opt = self.optimizer(servers, model, "--overlap_min_kb=0")
                if lose:  # the same pass, raising once fc3's and fc2's gradients are pushed
                    model.on_hidden = lambda h: h.register_hook(
                        lambda _: (_ for _ in ()).throw(RuntimeError("out of memory")))
                    with self.assertRaisesRegex(RuntimeError, "out of memory"):
                        F.cross_entropy(model(x), y).backward()
                    model.on_hidden = None
                    lost = ("step 0 cannot be finished: a backward pass raised \\(RuntimeError: "
                            "out of memory\\) leaving gradients partial, and the gradients of 4 "
                            "parameter\\(s\\) \\('fc2.weight', 'fc2.bias', 'fc3.weight', ...\\) have "
                            "been pushed, which cannot be taken back. Call opt.recover\\(\\)")
                    for call in (opt.zero_grad, lambda m=model: self.backward(m), opt.step):
                        with self.assertRaisesRegex(pt.StepLostError, lost):
                            call()
                    self.assertEqual(opt.recover(), 0)  # step 0 over, on the same samples
                    model.zero_grad()
                clean_step(opt, model)
                self.assertEqual(opt.step_number, 1)
                weights.append({n: p.detach().clone() for n, p in model.named_parameters()})
        for name, w in weights[0].items():
            self.assertTrue(torch.equal(weights[1][name], w), name)

    def test_passes_are_backward_calls_whatever_runs_inside_them(self):
        with Servers(self.TWO_PASSES) as servers:
            model, opt = self.two_pass_optimizer(servers)

            def checkpointed() -> None:  # every parameter in a reentrant segment of its own
                h = torch.randn(4, 20, requires_grad=True)
                for layer in (model.fc1, model.fc2, model.fc3):
                    h = torch.utils.checkpoint.checkpoint(layer, h)
                F.cross_entropy(h, torch.tensor([0, 1, 2, 3])).backward()

            checkpointed()  # one pass, however many graph tasks ran in it
            with self.assertRaisesRegex(pt.TooFewBackwardPassesError, "after 1 backward pass"):
                opt.step()
            h = model.fc1(torch.randn(4, 20))
            h.register_hook(lambda _: (_ for _ in ()).throw(RuntimeError("out of memory")))
            with self.assertRaisesRegex(RuntimeError, "out of memory"):
                F.cross_entropy(model.fc3(model.fc2(h)), torch.tensor([0, 1, 2, 3])).backward()
            opt.zero_grad()  # nothing pushed yet: the step starts again
            checkpointed()
            self.backward(model)
            opt.step()
            self.assertEqual(opt.step_number, 1)
            # A pass that raised after adding to some gradients leaves them partial
            # (fc3's and fc2's, here): nothing is pushed from them; the step
            # starts again from zero_grad().
            self.backward(model)
            h = model.fc1(torch.randn(4, 20))
            h.register_hook(lambda _: (_ for _ in ()).throw(RuntimeError("out of memory")))
            with self.assertRaisesRegex(RuntimeError, "out of memory"):
                F.cross_entropy(model.fc3(model.fc2(h)), torch.tensor([0, 1, 2, 3])).backward()
            partial = ("a backward pass of step 1 raised \\(RuntimeError: out of memory\\) after "
                       "reaching some parameters, whose gradients are now partial; nothing was "
                       "pushed: call opt.zero_grad\\(\\) \\(the optimizer's, not the model's\\) "
                       "before ")
            with self.assertRaisesRegex(pt.OptimizerError, partial + "another backward pass"):
                self.backward(model)
            with self.assertRaisesRegex(pt.OptimizerError, partial + "step"):
                opt.step()
            opt.zero_grad()
            self.backward(model)
            self.backward(model)
            opt.step()
            self.assertEqual(opt.step_number, 2)

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
            with self.assertRaisesRegex(ValueError, "step_samples is 0, expected an int >= 1"):
                opt.step_samples = 0
            self.backward(model)
            with self.assertRaisesRegex(pt.OptimizerError, "samples set to 2 after step 0's "
                                                           "backward began"):
                opt.samples = 2
        job = pt.init(["--servers=127.0.0.1:1"])
        with self.assertRaisesRegex(TypeError, "parameter 'weight' is torch.float64"):
            pt.DistributedOptimizer(torch.nn.Linear(2, 2).double(), job)
        with self.assertRaisesRegex(psync.InvalidArgumentError, "--frobnicate: no such job flag"):
            pt.init(["--servers=127.0.0.1:1", "--frobnicate=1"])
        with self.assertRaisesRegex(TypeError, "init: args is the string '--lr=0.1', expected "
                                               "a list of strings"):
            pt.init("--lr=0.1")
        with self.assertRaisesRegex(TypeError, "init: args\\[1\\] is 0.1 \\(float\\), "
                                               "expected a string"):
            pt.init(["--servers=127.0.0.1:1", 0.1])
        frozen = torch.nn.Module()
        frozen.a = torch.nn.Parameter(torch.zeros(2, 3), requires_grad=False)
        frozen.b = torch.nn.Parameter(torch.zeros(3, 2), requires_grad=False)
        frozen.c = torch.nn.Parameter(torch.zeros(6, dtype=torch.bfloat16), requires_grad=False)
        frozen.d = torch.nn.Parameter(torch.tensor(1.5), requires_grad=False)
        frozen.e = torch.nn.Parameter(torch.zeros(3))  # trained: not among them
        digests = pt.frozen_digests(frozen)
        self.assertEqual([n for n, _ in digests], ["a", "b", "c", "d"])
        self.assertEqual(len({d for _, d in digests}), 4)  # shape and dtype count, not just bytes
        self.assertTrue(all(len(d) == 64 for _, d in digests))
        epochs = ["--servers=127.0.0.1:1", "--epochs=2", "--batch_per_device=10"]
        with self.assertRaisesRegex(ValueError, "job.steps is unknown: the job trains --epochs "
                                                "\\(no --steps given\\), and init\\(\\) was not "
                                                "given the training set's size"):
            pt.init(epochs).steps
        self.assertEqual(pt.init(epochs, train_samples=95).steps, 20)  # 10 an epoch, the last short
        self.assertEqual(pt.init(epochs + ["--steps=7"]).steps, 7)


class ExampleTest(unittest.TestCase):

    def test_train_mlp_trains_on_fashion_mnist_and_reports_its_accuracy(self):
        job = ["--num_workers=1", "--batch_per_device=64", "--steps=30", "--lr=0.1"]
        script = os.path.join(os.environ["TEST_SRCDIR"], "psync/examples/torch/train_mlp.py")
        summary = os.path.join(os.environ["TEST_TMPDIR"], "train_mlp.json")
        with Servers(job) as servers:
            r = subprocess.run([sys.executable, script, "--hidden=64", servers.flag,
                                f"--summary={summary}"] + job,
                               capture_output=True, text=True, timeout=4 * BOUND_S)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("worker 0 of 1: 30 steps of 64 samples from step 0", r.stdout)
        accuracy = float(r.stdout.split("test accuracy ")[1].split()[0])
        self.assertGreater(accuracy, 0.5, r.stdout)  # 10 classes: chance is 0.1
        with open(summary) as f:
            recorded = json.load(f)
        self.assertEqual(recorded["steps"], 30)
        self.assertAlmostEqual(recorded["test_accuracy"], accuracy, places=4)

    def test_train_cnn_trains_on_fashion_mnist_and_reports_each_epoch(self):
        job = ["--num_workers=1", "--batch_per_device=64", "--steps=40", "--lr=0.05",
               "--momentum=0.9", "--seed=1"]
        script = os.path.join(os.environ["TEST_SRCDIR"], "psync/examples/torch/train_cnn.py")
        with Servers(job) as servers:
            r = subprocess.run([sys.executable, script, servers.flag] + job,
                               capture_output=True, text=True, timeout=4 * BOUND_S)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("worker 0 of 1: 40 steps of 64 samples from step 0", r.stdout)
        first_loss = float(r.stdout.split("step 0 loss ")[1].split()[0])
        epoch = re.search(r"^epoch 1 of 1: loss ([0-9.]+) test accuracy ([0-9.]+) [0-9]+ "
                          r"samples/s", r.stdout, re.MULTILINE)
        self.assertIsNotNone(epoch, r.stdout)
        self.assertLess(float(epoch[1]), first_loss, r.stdout)  # the 40 steps' mean loss
        self.assertGreater(float(epoch[2]), 0.5, r.stdout)  # 10 classes: chance is 0.1
        self.assertIn(f"\ntest accuracy {epoch[2]}\n", r.stdout)  # the final line

    def test_train_cnn_refuses_a_bad_channels_flag(self):
        script = os.path.join(os.environ["TEST_SRCDIR"], "psync/examples/torch/train_cnn.py")
        r = subprocess.run([sys.executable, script, "--channels=8", "--servers=127.0.0.1:1"],
                           capture_output=True, text=True, timeout=BOUND_S)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--channels='8': expected 2 positive integers", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
