"""The job a torch worker belongs to: :func:`init` reads its configuration.

A torch worker reads the same configuration as ``psync_worker`` and the
servers, from the same arguments: ``--config=FILE`` (a file every process of
the job shares), the job's flags over it (docs/configuration.md) and
``--worker_rank=N`` or ``--worker_rank=auto`` (``$JOB_COMPLETION_INDEX``, an
Indexed Job's completion index). The C++ client does the reading, so the
values, defaults and error messages are the daemons' own.
"""

import dataclasses
import sys
from typing import Optional, Sequence, Tuple

import torch

from . import _psync


@dataclasses.dataclass(frozen=True)
class Job:
    """One worker's view of the job's configuration (read-only)."""

    args: Tuple[str, ...]        # the arguments it was read from, for the client
    worker_rank: int             # this worker, in 0 .. num_workers - 1
    num_workers: int             # an elastic job's --max_workers: the global batch's workers
    min_workers: int             # > 0: an elastic job, which trains on with this many at least
    devices: int                 # --devices: this worker's share is devices x batch_per_device
    device: str                  # --device: auto, cpu or cuda (see torch_device)
    batch_per_device: int
    accumulation_steps: int      # backward passes (micro-batches) per step
    known_steps: int             # --steps, or --epochs over train_samples; 0: unknown (see steps)
    seed: int
    train_samples: int           # the training set's size, as given to init
    deterministic: bool
    data_dir: str                # --data_dir: where Fashion-MNIST is, for scripts that read it
    init_from: str               # "worker" (worker 0's model; --init_from left out) or "seed" (the servers')
    overlap: bool                # --overlap: push during backward
    overlap_min_kb: int          # --overlap_min_kb: the least payload a push during backward
    wire_dtype: str              # --wire_dtype: float32, bf16 or fp16
    export_path: str             # --export_path: worker 0 writes the final weights there ("": not)
    checkpoint_dir: str          # --checkpoint_dir: where the servers checkpoint ("": they do not)
    summary: str                 # --summary: worker 0 writes the run's summary there ("": not)

    @property
    def steps(self) -> int:
        """The steps the job trains: ``--steps``, or ``--epochs`` over the training set
        of ``train_samples`` given to :func:`init`. Raises ValueError where that is
        unknown (``--epochs`` and no ``train_samples``), rather than a loop to 0
        that trains nothing."""
        if self.known_steps == 0:
            raise ValueError(
                "job.steps is unknown: the job trains --epochs (no --steps given), and init() "
                "was not given the training set's size; pass init(args, "
                "train_samples=len(train_set)), or give --steps")
        return self.known_steps

    @property
    def elastic(self) -> bool:
        """Whether workers may join and leave while the job runs (``--min_workers``)."""
        return self.min_workers > 0

    def torch_device(self, local_rank: int = 0, local_size: int = 1) -> torch.device:
        """Where this worker's model trains (local process ``local_rank`` of
        ``local_size``'s, under local aggregation), from ``--device``, as
        ``psync_worker`` chooses: ``cuda:<local_rank>`` for ``cuda``, and for
        ``auto`` where torch sees a GPU for every local process; the CPU
        otherwise, for every local process alike. Raises ValueError for
        ``--device=cuda`` without those GPUs, or a ``local_rank`` outside
        ``0 .. local_size - 1``."""
        if not 0 <= local_rank < local_size:
            raise ValueError(f"torch_device: local_rank is {local_rank}, expected 0 .. "
                             f"local_size - 1 = {local_size - 1}")
        if self.device == "cpu":
            return torch.device("cpu")
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if local_size <= gpus:
            return torch.device("cuda", local_rank)
        if self.device == "cuda":
            raise ValueError(f"--device=cuda: {local_size} local process(es) need a GPU each, "
                             f"and torch {torch.__version__} sees {gpus}"
                             + ("" if torch.version.cuda else " (a build without CUDA)"))
        return torch.device("cpu")

    @property
    def worker_batch(self) -> int:
        """Samples this worker feeds to one backward pass: devices x batch_per_device."""
        return self.devices * self.batch_per_device

    @property
    def global_batch(self) -> int:
        """Samples of one step over every worker and micro-batch (an elastic job's
        at full size, ``--max_workers``, whoever trains the step)."""
        return self.num_workers * self.worker_batch * self.accumulation_steps


def init(args: Optional[Sequence[str]] = None, train_samples: int = 0) -> Job:
    """Reads the job's configuration from ``args`` (default: ``sys.argv[1:]``).

    ``args`` are the job's flags only, as strings (``"--servers=h:7070"``,
    ``"--config=job.txt"``, ``"--worker_rank=auto"``); a script with flags of
    its own parses those first (``argparse``'s ``parse_known_args``) and
    passes the rest. ``train_samples`` is the training set's size: the
    servers' learning-rate schedule counts epochs with it, and ``--epochs``
    becomes :attr:`Job.steps` through it. Sends nothing. Raises
    :class:`psync.InvalidArgumentError` naming a bad or unknown flag, and
    TypeError for ``args`` that are not a sequence of strings.
    """
    if isinstance(args, (str, bytes)):
        raise TypeError(f"init: args is the string {args!r}, expected a list of strings, "
                        f"e.g. [{args!r}]")
    given = tuple(sys.argv[1:] if args is None else args)
    for i, arg in enumerate(given):
        if not isinstance(arg, str):
            raise TypeError(f"init: args[{i}] is {arg!r} ({type(arg).__name__}), expected a "
                            f"string such as '--lr=0.1'")
    info = _psync.read_job(list(given), train_samples)
    return Job(args=given, known_steps=info.pop("steps"), **info)
