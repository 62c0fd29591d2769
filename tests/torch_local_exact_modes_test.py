"""psync.torch.LocalOptimizer's modes against single-process torch, at two
servers and two machines of two local processes each, global batch 64, 30
steps (the harness of torch_local_exact_test.py):

- A BatchNorm model, under docs/torch.md's buffer rule: its parameters match
  the "ghost batch" reference (each device's share through the model on its
  own, the mean losses weighted by share size); each machine's processes hold
  its root's buffers, and those equal the reference's running statistics
  updated from that root's shares only.
- --deterministic run twice ends with the same bits in every parameter.
- --accumulation_steps=2 equals training on the doubled batch.
"""

import unittest

import torch

import torch_test_util as tu
from torch_local_exact_test import (BATCH_PER_DEVICE, DEVICES, STEPS, WORKERS, ExactnessCase,
                                    run_job, train_torch)


class LocalModesTest(ExactnessCase):

    def test_batchnorm_follows_the_buffer_rule(self):
        runs = run_job(tu.job_flags(tu.SGD_MOMENTUM), kind="bn")
        self.assert_same_weights(runs)
        global_size = WORKERS * DEVICES * BATCH_PER_DEVICE
        want, roots = train_torch(runs[0][0], tu.SGD_MOMENTUM, "bn", global_size,
                                  ghost=BATCH_PER_DEVICE)
        self.assert_close(runs[0][1][0], want, "batchnorm parameters")
        for worker in range(WORKERS):
            machine = runs[worker * DEVICES:(worker + 1) * DEVICES]
            buffers = machine[0][1][1]
            for _, (_, other) in machine[1:]:
                for name in buffers:
                    self.assertTrue(torch.equal(other[name], buffers[name]), name)
            self.assertEqual(buffers["bn.num_batches_tracked"].item(), STEPS)
            self.assert_close(buffers, roots[worker * DEVICES], f"machine {worker}'s buffers")
        # The two machines' statistics come from different shares.
        self.assertFalse(torch.equal(runs[0][1][1]["bn.running_mean"],
                                     runs[DEVICES][1][1]["bn.running_mean"]))

    def test_deterministic_reruns_end_with_the_same_bits(self):
        flags = tu.job_flags(tu.ADAMW) + ["--deterministic"]
        first, second = run_job(flags), run_job(flags)
        self.assert_same_weights(first)
        self.assert_same_weights(second)
        for name, weights in first[0][1][0].items():
            self.assertTrue(torch.equal(second[0][1][0][name], weights), name)

    def test_accumulation_equals_the_doubled_batch(self):
        runs = run_job(tu.job_flags(tu.SGD_MOMENTUM) + ["--accumulation_steps=2"])
        self.assert_same_weights(runs)
        want, _ = train_torch(runs[0][0], tu.SGD_MOMENTUM, "mlp",
                              2 * len(runs) * BATCH_PER_DEVICE)
        self.assert_close(runs[0][1][0], want, "accumulation of 2")


if __name__ == "__main__":
    unittest.main(verbosity=2)
