"""What the Fashion-MNIST example workers share (docs/torch.md): the data set,
each step's global batch and this worker's share of it, the training loop
through psync.torch.DistributedOptimizer, evaluation and per-epoch progress.

The data set is Debian's `dataset-fashion-mnist` (gzip idx files under
--data_dir), read with the standard library. Step t's global batch is a
function of (--seed, t) alone, cut into one contiguous share per worker, so
the job trains as one process would on the whole batch, and a worker that
resumes after a rollback or a restart recomputes the same batches. In an
elastic job (--min_workers) the shares follow the step's members
(opt.share), a step of other workers is waited out, and SIGTERM makes the
worker leave between steps. The model and the data go to the job's
--device (job.torch_device(): a GPU where --device=cuda, or auto and torch
sees one).
"""

import argparse
import functools
import gzip
import os
import time
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

import psync
import psync.torch as pt

TRAIN_SAMPLES = 60000
# Evaluation runs in slices of this many samples, to bound the activations a
# convolutional model holds at once.
EVAL_SLICE = 1000


def init(parser: argparse.ArgumentParser) -> Tuple[argparse.Namespace, pt.Job]:
    """The script's own flags (`parser`'s) and the job's (the rest of the
    command line). A bad job flag (or --device=cuda without a GPU) exits with
    code 2, as a bad flag of the script's own does, naming it: psync_launch and a Kubernetes Job then fail
    the job at once rather than restart a worker that cannot start."""
    own, job_args = parser.parse_known_args()
    try:
        job = pt.init(job_args, train_samples=TRAIN_SAMPLES)
        job.torch_device()  # --device=cuda where torch sees no GPU fails as a bad flag
        return own, job
    except ValueError as e:  # psync.InvalidArgumentError among them
        parser.error(str(e))


def read_idx(path: str) -> torch.Tensor:
    """An idx file (gzip), as Fashion-MNIST ships: a uint8 tensor of its shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(data_dir: str, split: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Split "train" or "t10k": images as float32 in [0, 1] of shape
    [n, 1, 28, 28] (flatten(1) gives an MLP its 784 inputs), labels as int64."""
    if split not in ("train", "t10k"):
        raise ValueError(f"Fashion-MNIST split '{split}': expected 'train' or 't10k'")
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    return images.unsqueeze(1).float() / 255, labels.long()


@functools.lru_cache(maxsize=1)
def epoch_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    """The order of an epoch's samples, drawn from (seed, epoch): once an epoch."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch))


def steps_per_epoch(job: pt.Job, n: int) -> int:
    return (n + job.global_batch - 1) // job.global_batch


def global_batch(job: pt.Job, step: int, n: int) -> torch.Tensor:
    """Indices of step `step`'s global batch: each epoch a permutation drawn from
    (seed, epoch); the epoch's last batch may be short."""
    epoch, k = divmod(step, steps_per_epoch(job, n))
    order = epoch_order(job.seed, epoch, n)
    return order[k * job.global_batch:(k + 1) * job.global_batch]


def train_step(opt: pt.DistributedOptimizer, model: torch.nn.Module, x: torch.Tensor,
               y: torch.Tensor) -> float:
    """One step on this worker's share: accumulation_steps backward passes of
    micro-batches as equal as the share allows, then step(), which writes
    the next step's weights into the model's parameters. Returns the mean
    loss of the passes. A share that accumulation_steps does not divide (an
    elastic step's, or an epoch's short last one) is used whole: each pass's
    mean loss is weighted by its samples over the largest pass's, and the
    step's count is the share's, so the gradient is still the share's sum."""
    job = opt.job
    k_passes = job.accumulation_steps
    if len(x) < k_passes:
        raise ValueError(f"step {opt.step_number}: this worker's share has {len(x)} samples, "
                         f"expected {k_passes} (--accumulation_steps) at least")
    opt.zero_grad()
    opt.samples = -(-len(x) // k_passes)  # the largest pass's
    opt.step_samples = len(x)
    losses = []
    for k in range(k_passes):
        part = slice(k * len(x) // k_passes, (k + 1) * len(x) // k_passes)
        loss = F.cross_entropy(model(x[part]), y[part])
        n = part.stop - part.start
        (loss if n == opt.samples else loss * (n / opt.samples)).backward()
        losses.append(loss.detach())
    opt.step()
    return torch.stack(losses).mean().item()  # after step(): no wait for a GPU mid-step


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The fraction of `x` the model classifies as `y`, in slices of EVAL_SLICE."""
    correct = 0
    with torch.no_grad():
        for start in range(0, len(x), EVAL_SLICE):
            part = slice(start, start + EVAL_SLICE)
            correct += (model(x[part]).argmax(1) == y[part]).sum().item()
    return correct / len(x)


class EpochProgress:
    """Worker 0's account of an epoch: the mean loss of the steps this process
    ran, and the job's training throughput (global samples over the epoch's
    wall time, evaluation left out)."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self.loss_sum, self.steps, self.samples = 0.0, 0, 0
        self.began = time.monotonic()

    def add(self, loss: float, global_samples: int) -> None:
        self.loss_sum += loss
        self.steps += 1
        self.samples += global_samples

    def line(self, epoch: int, epochs: int, test_accuracy: float) -> str:
        elapsed = max(time.monotonic() - self.began, 1e-9)
        return (f"epoch {epoch} of {epochs}: loss {self.loss_sum / max(self.steps, 1):.4f} "
                f"test accuracy {test_accuracy:.4f} {self.samples / elapsed:.0f} samples/s "
                f"({elapsed:.1f} s)")


def leave(opt: pt.DistributedOptimizer, stop: pt.StopOnSignal) -> None:
    """SIGTERM or SIGINT between steps: an elastic job trains on without this
    worker, which leaves and ends cleanly (exit 0); a fixed job needs it back,
    so it exits 128 + the signal, as psync_worker does, to be restarted."""
    if not opt.job.elastic:
        raise SystemExit(128 + stop.signal)
    opt.leave()
    print(f"worker {opt.job.worker_rank} left the job (stopped before step {opt.step_number}); "
          f"the other workers train on", flush=True)


def train(model: torch.nn.Module, job: pt.Job, flatten: bool = False) -> Optional[float]:
    """Trains `model` (built completely, its parameters float32) through psync
    for job.steps steps on Fashion-MNIST under job.data_dir: the servers'
    weights are written into its parameters at the start and after every
    step. `flatten` gives the model [n, 784] inputs instead of [n, 1, 28, 28].
    Every worker prints its loss every 100 steps; worker 0 evaluates
    the test set at the end of each epoch (and of the job), prints the epoch's
    loss, test accuracy and samples/s, and returns the final test accuracy
    (None on other workers), which the job's --summary records."""
    device = job.torch_device()
    model.to(device)
    x_train, y_train = (t.to(device) for t in load(job.data_dir, "train"))
    x_test, y_test = ((t.to(device) for t in load(job.data_dir, "t10k"))
                      if job.worker_rank == 0 else (None, None))
    if flatten:
        x_train = x_train.flatten(1)
        x_test = x_test.flatten(1) if x_test is not None else None
    n = len(x_train)
    per_epoch = steps_per_epoch(job, n)
    epochs = (job.steps + per_epoch - 1) // per_epoch
    final = None
    with pt.StopOnSignal() as stop, pt.DistributedOptimizer(model, job) as opt:
        print(f"worker {job.worker_rank} of {job.num_workers}: {job.steps} steps of "
              f"{job.global_batch} samples from step {opt.step_number} on {device}", flush=True)
        progress = EpochProgress()
        while opt.step_number < job.steps:
            if stop.requested:  # between steps, as psync_worker stops
                return leave(opt, stop)
            step = opt.step_number
            batch = global_batch(job, step, n)
            try:
                if opt.trains:
                    mine = batch[opt.share(len(batch))].to(device)
                    loss = train_step(opt, model, x_train[mine], y_train[mine])
                else:  # an elastic job's step of other workers (before this one joined)
                    opt.wait_out()
                    continue
            except psync.Error as e:
                if e.code != "ABORTED":
                    raise
                # A rollback, or an elastic job's workers changed: resume where
                # the servers say, with the members they name.
                print(f"registered again: resuming from step {opt.recover()} with workers "
                      f"{list(opt.members.ranks)}", flush=True)
                continue
            progress.add(loss, len(batch))
            if step % 100 == 0 or step == job.steps - 1:
                print(f"step {step} loss {loss:.4f}", flush=True)
            if job.worker_rank == 0 and ((step + 1) % per_epoch == 0 or step == job.steps - 1):
                # The model holds the weights of step + 1: the epoch's result.
                final = accuracy(model, x_test, y_test)
                print(progress.line(step // per_epoch + 1, epochs, final), flush=True)
                progress.start()
        if job.worker_rank == 0 and final is None:  # resumed at the end: nothing trained here
            final = accuracy(model, x_test, y_test)
        # Worker 0 writes --export_path and --summary (with the accuracy), if given.
        opt.finish(metrics={} if final is None else {"test_accuracy": final})
    if final is not None:
        print(f"test accuracy {final:.4f}", flush=True)
    return final
