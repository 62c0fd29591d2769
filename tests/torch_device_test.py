"""psync.torch with a model on a GPU, and the CPU twin of that path.

Parameters on a CUDA device reach the client through pinned host copies
(psync/host.py). `staged=True` sends CPU parameters the same way; here it
must give the direct path's weights bit for bit (deterministic job, hooks
pushing each parameter during backward, accumulation). Where torch sees a
GPU the model also trains on it, alone and as two worker processes sharing
it, and must match torch.optim on the CPU within RTOL; without a GPU those
cases are skipped, saying why, and `--device=cuda` must be refused naming
what torch sees. Parameters on an unsupported device or on two devices are
refused by name."""

import sys
import tempfile
import unittest

import torch

import psync.torch as pt
import torch_test_util as tu
from psync import host
from psync_servers import Servers

SETTINGS = tu.SGD_MOMENTUM
JOB = tu.BASE_JOB + tu.job_flags(SETTINGS) + ["--deterministic", "--overlap",
                                              "--overlap_min_kb=0"]
GPU = torch.cuda.is_available() and torch.cuda.device_count() > 0


class TorchDeviceTest(unittest.TestCase):

    def assert_close(self, got: tu.Weights, want: tu.Weights, what: str) -> None:
        worst = 0.0
        for name, w in want.items():
            err = (got[name].double() - w.double()).abs().max().item()
            scale = w.double().abs().max().item()
            self.assertLessEqual(err, tu.RTOL * scale, f"{what}: {name} off by {err}")
            worst = max(worst, err / scale if scale else err)
        print(f"{what}: largest relative error {worst:.1e}", file=sys.stderr)

    def train(self, device: str, workers: int = 1, staged=None, micro_batches: int = 1):
        job = JOB + [f"--num_workers={workers}", f"--device={device}",
                     f"--accumulation_steps={micro_batches}"]
        with Servers(job, count=2) as servers:
            if workers == 1:
                return [tu.train_worker([servers.flag] + job, 0, 1, micro_batches, staged)]
            with tempfile.TemporaryDirectory() as out:
                return tu.train_worker_processes([servers.flag] + job, workers, out)

    def assert_equal(self, got: tu.Weights, want: tu.Weights) -> None:
        for name, w in want.items():
            self.assertTrue(torch.equal(got[name], w), name)

    def test_host_copies_give_the_direct_paths_bits(self):
        direct = self.train("cpu", micro_batches=2)[0]
        self.assertFalse(torch.equal(direct[0]["fc1.weight"], direct[1]["fc1.weight"]))
        staged = self.train("cpu", staged=True, micro_batches=2)[0]
        self.assert_equal(staged[0], direct[0])
        self.assert_equal(staged[1], direct[1])

    def test_pushes_that_wait_for_their_copies_give_the_same_bits(self):
        # Copies that are never done before step(), as on a GPU that lags behind
        # the queue: every push waits for step(), in the order the runs started.
        calls = {"query": 0, "synchronize": 0}

        class LateEvent:
            def query(self) -> bool:
                calls["query"] += 1
                return False

            def synchronize(self) -> None:
                calls["synchronize"] += 1

        direct = self.train("cpu")[0]
        event = host._event
        host._event = lambda _device: LateEvent()
        try:
            late = self.train("cpu", staged=True)[0]
        finally:
            host._event = event
        self.assert_equal(late[1], direct[1])
        self.assertGreater(calls["query"], 0)
        self.assertGreater(calls["synchronize"], tu.STEPS)

    def test_a_model_on_the_gpu_trains_as_torch_does(self):
        if not GPU:
            self.skipTest(f"torch {torch.__version__} sees no GPU")
        first, last = self.train("cuda")[0]
        self.assert_close(last, tu.train_torch(first, SETTINGS), "1 worker on the GPU")
        runs = self.train("cuda", workers=2)
        for name in runs[0][1]:
            self.assertTrue(torch.equal(runs[0][1][name], runs[1][1][name]), name)
        self.assert_close(runs[0][1], tu.train_torch(runs[0][0], SETTINGS),
                          "2 workers on one GPU")

    def test_device_cuda_without_a_gpu_is_refused(self):
        if GPU:
            self.skipTest(f"torch {torch.__version__} sees a GPU")
        job = pt.init(["--servers=127.0.0.1:1", "--device=cuda"])
        with self.assertRaisesRegex(ValueError, r"--device=cuda: 1 local process\(es\) need a "
                                                r"GPU each, and torch .* sees 0"):
            job.torch_device()
        self.assertEqual(pt.init(["--servers=127.0.0.1:1"]).torch_device(), torch.device("cpu"))

    def test_parameters_on_another_device_or_two_devices_are_refused(self):
        job = pt.init(["--servers=127.0.0.1:1"])
        with self.assertRaisesRegex(TypeError, "DistributedOptimizer: parameter 'weight' is on "
                                               "meta, expected the CPU or a CUDA device"):
            pt.DistributedOptimizer(torch.nn.Linear(2, 2, device="meta"), job)
        if GPU:
            model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).cuda())
            with self.assertRaisesRegex(TypeError, "parameter '1.weight' is on cuda:0 and "
                                                   "parameter '0.weight' on cpu, expected one "
                                                   "device"):
                pt.DistributedOptimizer(model, job)


if __name__ == "__main__":
    unittest.main(verbosity=2)
