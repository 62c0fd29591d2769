"""Trains a small MLP on Fashion-MNIST as one psync worker (docs/torch.md).

Every worker of the job runs this script with the job's flags (the same as
the servers', or one --config file) and its own --worker_rank:

    PYTHONPATH=bazel-bin/worker/torch/python /usr/bin/python3 \\
        examples/torch/train_mlp.py --servers=127.0.0.1:7070 --num_workers=1 \\
        --batch_per_device=32 --epochs=1 --lr=0.05 --momentum=0.9 --worker_rank=0

The servers own the update (the job's --optimizer, --lr, schedule); the
script computes gradients of the mean loss over its share of each global
batch and lets DistributedOptimizer push them. Step t's global batch is a
function of (--seed, t) alone, cut into one contiguous share per worker, so
the job trains as one process would on the whole batch. The script's own
flag: --hidden (the MLP's hidden widths). Worker 0 prints the test accuracy,
which the job's --summary records, and writes the weights to --export_path.
"""

import argparse
import functools
import gzip
import os
import sys
from typing import Tuple

import torch
import torch.nn.functional as F

import psync
import psync.torch as pt


def read_idx(path: str) -> torch.Tensor:
    """An idx file (gzip), as Fashion-MNIST ships: a uint8 tensor of its shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def fashion_mnist(data_dir: str, split: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Images as float32 in [0, 1], flattened to 784, and labels as int64."""
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    return images.reshape(len(images), -1).float() / 255, labels.long()


def mlp(widths) -> torch.nn.Sequential:
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


@functools.lru_cache(maxsize=1)
def epoch_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    """The order of an epoch's samples, drawn from (seed, epoch): once an epoch."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch))


def global_batch(job: pt.Job, step: int, n: int) -> torch.Tensor:
    """Indices of step `step`'s global batch: each epoch a permutation drawn from
    (seed, epoch); the epoch's last batch may be short."""
    per_epoch = (n + job.global_batch - 1) // job.global_batch
    epoch, k = divmod(step, per_epoch)
    order = epoch_order(job.seed, epoch, n)
    return order[k * job.global_batch:(k + 1) * job.global_batch]


def train_step(opt: pt.DistributedOptimizer, model, x, y) -> float:
    """One step on this worker's share: accumulation_steps backward passes of
    equal micro-batches (a short share's remainder is left out), then step()."""
    job = opt.job
    per_pass = len(x) // job.accumulation_steps
    if per_pass < 1:
        raise ValueError(f"step {opt.step_number}: this worker's share has {len(x)} samples, "
                         f"expected {job.accumulation_steps} (--accumulation_steps) at least")
    opt.zero_grad()
    opt.samples = per_pass
    loss_sum = 0.0
    for k in range(job.accumulation_steps):
        part = slice(k * per_pass, (k + 1) * per_pass)
        loss = F.cross_entropy(model(x[part]), y[part])
        loss.backward()
        loss_sum += loss.item()
    opt.step()
    return loss_sum / job.accumulation_steps


def accuracy(model, x, y) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", default="256,128", help="hidden widths, e.g. 256,128")
    own, job_args = parser.parse_known_args()
    torch.manual_seed(0)  # the servers' weights replace these (docs/torch.md)
    job = pt.init(job_args, train_samples=60000)
    x_train, y_train = fashion_mnist(job.data_dir, "train")
    model = mlp([784] + [int(w) for w in own.hidden.split(",")] + [10])
    with pt.DistributedOptimizer(model, job) as opt:
        print(f"worker {job.worker_rank} of {job.num_workers}: {job.steps} steps of "
              f"{job.global_batch} samples from step {opt.step_number}", flush=True)
        while opt.step_number < job.steps:
            step = opt.step_number
            share = global_batch(job, step, len(x_train)).tensor_split(job.num_workers)
            mine = share[job.worker_rank]
            try:
                loss = train_step(opt, model, x_train[mine], y_train[mine])
            except psync.Error as e:
                if e.code != "ABORTED":
                    raise
                print(f"the servers rolled back: resuming from step {opt.recover()}", flush=True)
                continue
            if step % 100 == 0 or step == job.steps - 1:
                print(f"step {step} loss {loss:.4f}", flush=True)
        metrics = {}
        if job.worker_rank == 0:
            x_test, y_test = fashion_mnist(job.data_dir, "t10k")
            metrics["test_accuracy"] = accuracy(model, x_test, y_test)
            print(f"test accuracy {metrics['test_accuracy']:.4f}", flush=True)
        # Worker 0 writes --export_path and --summary (with the accuracy), if given.
        opt.finish(metrics=metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
