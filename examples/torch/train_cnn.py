"""Trains a CNN on Fashion-MNIST as one psync worker (docs/torch.md).

The network is psync_worker's --model=cnn (worker/model/cnn.h): conv1 5x5,
16 channels, 'same' padding -> ReLU -> 2x2 max-pool -> conv2 5x5, 32
channels -> ReLU -> 2x2 max-pool -> fc1 128 -> ReLU -> fc2 10, with the
same parameter names and shapes. Every worker of the job runs this script
with the job's flags and its own --worker_rank, most simply under
psync_launch, which appends them:

    bazel-bin/deploy/local/psync_launch --num_servers=2 --num_workers=2 \\
        --batch_per_device=32 --epochs=12 --lr=0.05 --momentum=0.9 \\
        --weight_decay=0.0005 --seed=1 --lr_schedule=cosine \\
        --worker_cmd='OMP_NUM_THREADS=1 /usr/bin/python3 examples/torch/train_cnn.py'

The servers own the update; the script computes gradients of the mean loss
over its share of each global batch, and DistributedOptimizer pushes them
(fashion_mnist.train: the batches, the loop, the rollback). Its own flags:
--channels and --hidden. Worker 0 prints each epoch's loss, test accuracy
and samples/s, and the final test accuracy.
"""

import argparse
import sys
from typing import List

import torch
import torch.nn.functional as F

import fashion_mnist


class Cnn(torch.nn.Module):
    """conv1 -> ReLU -> pool -> conv2 -> ReLU -> pool -> fc1 -> ReLU -> fc2
    on [n, 1, 28, 28] images; returns [n, classes] logits."""

    def __init__(self, conv1: int = 16, conv2: int = 32, hidden: int = 128, classes: int = 10,
                 kernel: int = 5) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, conv1, kernel, padding=kernel // 2)
        self.conv2 = torch.nn.Conv2d(conv1, conv2, kernel, padding=kernel // 2)
        self.fc1 = torch.nn.Linear(conv2 * 7 * 7, hidden)
        self.fc2 = torch.nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def positive_ints(text: str, count: int, flag: str) -> List[int]:
    values = text.split(",")
    if len(values) != count or not all(v.isdigit() and int(v) > 0 for v in values):
        expected = "a positive integer" if count == 1 else \
            f"{count} positive integers separated by commas"
        raise argparse.ArgumentTypeError(f"{flag}='{text}': expected {expected}")
    return [int(v) for v in values]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--channels", default="16,32",
                        type=lambda t: positive_ints(t, 2, "--channels"),
                        help="conv1 and conv2 output channels, e.g. 16,32")
    parser.add_argument("--hidden", default="128", type=lambda t: positive_ints(t, 1, "--hidden"),
                        help="fc1's width")
    own, job = fashion_mnist.init(parser)
    torch.manual_seed(job.seed)  # worker 0's model is the job's start (docs/torch.md)
    model = Cnn(own.channels[0], own.channels[1], own.hidden[0])
    fashion_mnist.train(model, job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
