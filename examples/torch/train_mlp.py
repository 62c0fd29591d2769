"""Trains a small MLP on Fashion-MNIST as one psync worker (docs/torch.md).

Every worker of the job runs this script with the job's flags (the same as
the servers', or one --config file) and its own --worker_rank:

    PYTHONPATH=bazel-bin/worker/torch/python /usr/bin/python3 \\
        examples/torch/train_mlp.py --servers=127.0.0.1:7070 --num_workers=1 \\
        --batch_per_device=32 --epochs=1 --lr=0.05 --momentum=0.9 --worker_rank=0

The servers own the update (the job's --optimizer, --lr, schedule); the
script computes gradients of the mean loss over its share of each global
batch and lets DistributedOptimizer push them (fashion_mnist.train). The
script's own flag: --hidden (the MLP's hidden widths). Worker 0 prints each
epoch's loss, test accuracy and samples/s, and the final test accuracy,
which the job's --summary records; it writes the weights to --export_path.
"""

import argparse
import sys
from typing import Sequence

import torch

import fashion_mnist


def mlp(widths: Sequence[int]) -> torch.nn.Sequential:
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", default="256,128", help="hidden widths, e.g. 256,128")
    own, job = fashion_mnist.init(parser)
    torch.manual_seed(job.seed)  # worker 0's model is the job's start (docs/torch.md)
    model = mlp([784] + [int(w) for w in own.hidden.split(",")] + [10])
    fashion_mnist.train(model, job, flatten=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
