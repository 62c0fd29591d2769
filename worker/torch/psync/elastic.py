"""Who trains each step, each worker's share of a step's samples, and a leave
on SIGTERM: what a torch worker needs to take part in an elastic job
(``--min_workers``, docs/torch.md#elastic-jobs).

An elastic job's coordinator decides which workers train each step, and a
worker learns it when it registers (again after every change: its calls
fail with ``ABORTED`` and it recovers). A step's global batch is a function
of the step alone, ``--max_workers`` workers' worth of samples whoever
trains; its samples are divided among the step's members in proportion to
their weights (each worker's devices), in rank order, by the C++ rule
``psync_worker``'s sharding and the servers use (``WorkerSet::ShareOf``,
called here rather than written again), so the job trains as a fixed job
of the same global batch does. A fixed job is the special case: every rank,
weight 1, every step.
"""

import dataclasses
import signal
import threading
from typing import List, Optional, Sequence, Tuple

from . import _psync
from .job import Job


@dataclasses.dataclass(frozen=True)
class WorkerSet:
    """The workers that train a run of steps from ``first_step`` on: ascending
    ``ranks`` and each one's weight."""

    first_step: int
    ranks: Tuple[int, ...]
    weights: Tuple[float, ...]

    def has(self, rank: int) -> bool:
        return rank in self.ranks

    def share(self, rank: int, samples: int) -> slice:
        """``rank``'s part of ``samples`` samples: ``slice(begin, end)``, the
        members' parts in rank order, in proportion to their weights, every
        sample in exactly one; empty for a rank that is not a member."""
        begin, end = _psync.share_of(list(self.ranks), list(self.weights), rank, samples)
        return slice(begin, end)


def everyone(num_workers: int) -> WorkerSet:
    """A fixed job's one set: every rank, weight 1, from step 0."""
    return WorkerSet(0, tuple(range(num_workers)), (1.0,) * num_workers)


@dataclasses.dataclass(frozen=True)
class StepMembers:
    """The set a worker learnt at registration: ``current`` trains every step
    from its first step on (a change of the members starts at the lowest step
    any chunk is at, so no earlier step is trained again)."""

    current: WorkerSet

    def at(self, step: int) -> WorkerSet:
        """The set that trains ``step``: the one set (C++ has no wrapper: a
        ``WorkerSet`` from its first step on)."""
        return self.current

    def encode(self) -> List[float]:
        """As numbers, for a tensor one local process broadcasts to the others."""
        s = self.current
        return [float(s.first_step), float(len(s.ranks))] + [float(r) for r in s.ranks] + list(s.weights)

    @staticmethod
    def decode(values: Sequence[float]) -> "StepMembers":
        """The inverse of :meth:`encode`."""
        first, n = int(values[0]), int(values[1])
        ranks = tuple(int(r) for r in values[2:2 + n])
        weights = tuple(float(w) for w in values[2 + n:2 + 2 * n])
        return StepMembers(WorkerSet(first, ranks, weights))


def members_of(client, job: Job) -> StepMembers:
    """Who trains each step, as ``client`` (a :class:`psync.torch.Client`, just
    registered) heard from the servers; every worker, every step, in a fixed
    job (as ``psync_worker`` reads them)."""
    sets = client.members() if job.elastic else None
    if not sets:
        return StepMembers(everyone(job.num_workers))
    first, ranks, weights = sets[0]
    return StepMembers(WorkerSet(first, tuple(ranks), tuple(weights)))


def device_share(machine: slice, devices: int, device: int) -> slice:
    """Local process ``device``'s part of its machine's share ``machine``, cut
    among the machine's ``devices`` processes as psync_worker cuts a worker's
    share among equal devices (``Sharding::ElasticDeviceRange``)."""
    part = everyone(devices).share(device, machine.stop - machine.start)
    return slice(machine.start + part.start, machine.start + part.stop)


class StopOnSignal:
    """Catches SIGTERM and SIGINT while the ``with`` block runs, so that the
    training loop stops between steps rather than in the middle of one
    (``psync_worker``'s rule): :attr:`signal` is the first signal caught,
    None until one is. In an elastic job the loop then calls the optimizer's
    ``leave()`` and exits 0; in a fixed job it exits ``128 + signal``, as
    ``psync_worker`` does, so that a launcher restarts it. Install it from
    the main thread, as Python's ``signal`` requires."""

    def __init__(self, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self._signals = tuple(signals)
        self._previous = {}
        self._caught = threading.Event()
        self.signal: Optional[int] = None

    @property
    def requested(self) -> bool:
        return self._caught.is_set()

    def wait(self, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` for a signal; True once one was caught."""
        return self._caught.wait(timeout_s)

    def _catch(self, signum, _frame) -> None:
        if self.signal is None:
            self.signal = signum
        self._caught.set()

    def __enter__(self) -> "StopOnSignal":
        try:
            for s in self._signals:
                self._previous[s] = signal.signal(s, self._catch)
        except BaseException:  # e.g. a signal that cannot be caught: put back what was set
            self.__exit__()
            raise
        return self

    def __exit__(self, *_unused) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
