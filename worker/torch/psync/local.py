"""Local aggregation: the processes of one machine train as one psync worker.

psync's worker is a machine. Where a machine runs one process per device
(as ``torchrun`` starts them: ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``), those processes form a local
``torch.distributed`` group (:func:`init_local`, gloo) and share the
machine's worker rank; each is one of the job's ``--devices``. At every
step (:meth:`LocalOptimizer.step`) each process's gradient sums are reduced
to local rank 0, the local root; the root alone holds a :class:`Client`,
registers, pushes the machine's sum with the machine's sample count and
pulls the new weights, which it then broadcasts to the others with its
buffers (BatchNorm's running statistics), so that a machine's processes hold
one model. The group's collectives move CPU tensors: a model on a CUDA
device is copied through host memory (``torchrun`` with one GPU per process;
NCCL between a machine's GPUs is not used yet). Every
collective is bounded by the group's timeout, so a dead local process
fails its machine's step instead of hanging it. Not thread-safe: one
training loop per process drives it.
"""

import dataclasses
import datetime
import json
import os
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from . import _psync
from .elastic import StepMembers, WorkerSet, device_share, members_of
from .export import Metrics, RunOutputs, model_state, pull_master, save_file
from .host import HostTensors, check_device
from .job import Job
from .optimizer import (OptimizerError, PassCounter, SparseGradientError, StepWithoutBackwardError,
                        TooFewBackwardPassesError, TooManyBackwardPassesError, accumulator_hook,
                        check_unchanged, checked_parameters, frozen_digests, initial_values, join,
                        trainable_parameters, zero_grad)
from .torch import Client

ROOT = 0  # the local rank that talks to the servers
_ALIGN = 8  # bytes: where each tensor starts in the root's broadcast, so any dtype views it


def _carried_buffers(model: torch.nn.Module) -> List[Tuple[str, torch.Tensor]]:
    """The buffers the root's broadcast carries, by name: ``model``'s
    floating-point and integer ones (BatchNorm's running statistics and batch
    count), in ``buffers()`` order."""
    return [(name, b) for name, b in model.named_buffers()
            if not b.dtype.is_complex and b.dtype != torch.bool]


def _check_buffers(model: torch.nn.Module) -> None:
    """Raises TypeError naming a carried buffer that is sparse or on another
    device than the parameters (once, before registering)."""
    carried = _carried_buffers(model)
    for name, b in carried:
        if b.is_sparse:
            raise TypeError(f"LocalOptimizer: buffer '{name}' is a {b.layout} tensor, expected "
                            f"a dense one")
    check_device(trainable_parameters(model)[:1] + carried, "LocalOptimizer", "buffer")


def _byte_offsets(tensors: Sequence[torch.Tensor]) -> Tuple[List[int], int]:
    """Where each of ``tensors`` starts in one flat byte buffer (at a multiple of
    _ALIGN, as viewing the bytes as its dtype requires), and the buffer's size."""
    offsets, end = [], 0
    for t in tensors:
        end += -end % _ALIGN
        offsets.append(end)
        end += t.numel() * t.element_size()
    return offsets, end


def _views(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Consecutive views of the float32 ``flat`` shaped as ``tensors``."""
    views, start = [], 0
    for t in tensors:
        views.append(flat[start:start + t.numel()].view(t.shape))
        start += t.numel()
    return views


def _byte_views(flat: torch.Tensor, tensors: Sequence[torch.Tensor],
                offsets: Sequence[int]) -> List[torch.Tensor]:
    """Each of ``tensors``' place in the byte buffer ``flat``, viewed as its dtype
    and shape."""
    return [flat[o:o + t.numel() * t.element_size()].view(t.dtype).view(t.shape)
            for t, o in zip(tensors, offsets)]


@dataclasses.dataclass(frozen=True)
class LocalGroup:
    """This process's place among its machine's processes (see :func:`init_local`)."""

    rank: int          # LOCAL_RANK: 0 is the root, the one that talks to the servers
    size: int          # LOCAL_WORLD_SIZE: the machine's processes, its --devices
    timeout_s: float   # the bound on every collective of the group

    @property
    def is_root(self) -> bool:
        return self.rank == ROOT

    def close(self) -> None:
        """Destroys the process group :func:`init_local` made."""
        if dist.is_initialized():
            dist.destroy_process_group()


def _env_int(env: Mapping[str, str], name: str, low: int) -> int:
    value = env.get(name)
    if value is None:
        raise ValueError(f"init_local: ${name} is not set, expected it from torchrun "
                         f"(or set by hand: LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, "
                         f"MASTER_PORT)")
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low:
        raise ValueError(f"init_local: ${name} is {value!r}, expected an integer >= {low}")
    return number


def init_local(job: Job, timeout_s: float = 300.0,
               env: Optional[Mapping[str, str]] = None) -> LocalGroup:
    """Joins this process to its machine's local group, as ``torchrun`` describes it
    in ``env`` (default ``os.environ``): ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and
    the group's rendezvous ``MASTER_ADDR:MASTER_PORT``, one per machine.

    ``LOCAL_WORLD_SIZE`` must equal the job's ``--devices``: each process is
    one device of the machine's worker. ``timeout_s`` bounds every
    collective; make it longer than a step may wait on the servers
    (``--pull_timeout_s``). Makes torch.distributed's default group (gloo);
    raises ValueError naming a missing or wrong variable.
    """
    env = os.environ if env is None else env
    if not timeout_s > 0:
        raise ValueError(f"init_local: timeout_s is {timeout_s!r}, expected > 0")
    size = _env_int(env, "LOCAL_WORLD_SIZE", 1)
    rank = _env_int(env, "LOCAL_RANK", 0)
    if rank >= size:
        raise ValueError(f"init_local: $LOCAL_RANK is {rank}, expected < $LOCAL_WORLD_SIZE "
                         f"({size})")
    if size != job.devices:
        raise ValueError(f"init_local: $LOCAL_WORLD_SIZE is {size} but the job has "
                         f"--devices={job.devices}: give each machine --devices=<its local "
                         f"processes>, each process is one device")
    if "WORLD_SIZE" in env and _env_int(env, "WORLD_SIZE", 1) != size:
        raise ValueError(f"init_local: $WORLD_SIZE is {env['WORLD_SIZE']}, $LOCAL_WORLD_SIZE "
                         f"{size}: run one torchrun per machine (--nnodes=1), psync joins "
                         f"the machines")
    address = f"tcp://{env.get('MASTER_ADDR', '127.0.0.1')}:{_env_int(env, 'MASTER_PORT', 1)}"
    dist.init_process_group("gloo", init_method=address, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return LocalGroup(rank=rank, size=size, timeout_s=timeout_s)


class LocalOptimizer:
    """Trains ``model`` through the servers of ``job`` as one device (local process)
    of this machine's worker; every local process of the machine makes one.

    Construction registers the model's trainable parameters on the root and
    gives every local process the weights of the step training resumes from
    (:attr:`step_number`). Each backward's loss is a MEAN over this process's
    :attr:`samples` (by default ``job.batch_per_device``); :meth:`step` sends
    its gradients times that count to the root, which pushes the machine's sum
    with the machine's count, and writes the new weights into the parameters
    in place on every local process. A failure of the root's call to the
    servers is raised on every local process as :class:`psync.Error` with the
    root's ``code`` (``'ABORTED'``: call :meth:`recover` on every process).

    Buffers (BatchNorm's running statistics) are not the servers': each
    process's forward updates its own, and after registering and every step
    the root's floating-point and integer buffers travel with the new weights
    into every local process's, in place, so a machine's processes hold one
    model (DDP's ``broadcast_buffers``, the machine being the group). Other
    machines' buffers follow their own roots' shares.

    A model on a GPU goes through host memory: the group's buffers, and the
    root's pinned host copies for its client (:mod:`psync.host`;
    ``staged=True`` sends CPU parameters the same way, for tests).
    """

    def __init__(self, model: torch.nn.Module, job: Job, local: LocalGroup, *,
                 staged: bool = False) -> None:
        named = checked_parameters(model, "LocalOptimizer")
        _check_buffers(model)  # refuses a buffer the group cannot carry, before registering
        self._model = model
        self._job = job
        self._local = local
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._shapes = [tuple(p.shape) for p in self._params]
        # Where the root's client reads and writes (the others' gradients and weights
        # travel in the group's buffers).
        self._host = HostTensors(self._params, staged) if local.is_root else None
        # Worker 0's root writes --export_path and --summary (checked now).
        self._outputs = RunOutputs(job, model, writer=job.worker_rank == 0 and local.is_root)
        self._master: Optional[List[torch.Tensor]] = None
        self._finished = False
        self._client: Optional[Client] = None
        self._initial = None
        frozen = frozen_digests(model)
        if local.is_root:
            self._client = Client(job.args, [(n, tuple(p.shape)) for n, p in named],
                                  job.train_samples, unset_init=job.init_from, frozen=frozen)
            self._initial = initial_values(job, self._host)
        # Every tensor the group's collectives take is made once and kept for the
        # optimizer's life: no allocation per step, and no deadlock in torch 2's
        # destroy_process_group, which joins gloo's threads holding the GIL while
        # one of them, dropping the last reference to a tensor Python made, waits
        # for the GIL to free it.
        self._grads = torch.zeros(sum(p.numel() for p in self._params), dtype=torch.float32)
        self._grad_views = _views(self._grads, self._params)
        self._count = torch.zeros(1, dtype=torch.int64)
        self._header = torch.zeros(3, dtype=torch.int64)  # failed, step, message bytes
        self._message = torch.empty(0, dtype=torch.uint8)
        self._weights = torch.empty(0, dtype=torch.uint8)
        self._members_size = torch.zeros(1, dtype=torch.int64)
        self._members_values = torch.empty(0, dtype=torch.float64)
        self._samples = job.batch_per_device
        # The root's frozen digests (JSON bytes, and their length) and the
        # highest local rank + 1 whose differ (0: none), once.
        self._frozen_size = torch.zeros(1, dtype=torch.int64)
        self._frozen_text = torch.empty(0, dtype=torch.uint8)
        self._frozen_flag = torch.zeros(1, dtype=torch.int64)
        self._check_frozen_alike(frozen)
        self.step_number = self._join()
        self._outputs.start(self.step_number)
        # This step's backward passes (before any collective, step() refuses
        # other than accumulation_steps).
        self._counter = PassCounter(len(self._params))
        hooks = [accumulator_hook(p, lambda *_, i=i: self._counter.reached(i))
                 for i, p in enumerate(self._params)]
        self._hooks = [handle for handle, _ in hooks]
        self._accumulators = [accumulator for _, accumulator in hooks]  # kept alive

    @property
    def job(self) -> Job:
        return self._job

    @property
    def local(self) -> LocalGroup:
        return self._local

    @property
    def client(self) -> Optional[Client]:
        """The root's :class:`psync.torch.Client`; None on the other local processes."""
        return self._client

    @property
    def device_rank(self) -> int:
        """This process's device among the job's ``num_workers x devices``: its share of
        a global batch is samples ``device_rank x batch_per_device ..`` on."""
        return self._job.worker_rank * self._job.devices + self._local.rank

    @property
    def members(self) -> WorkerSet:
        """The workers (machines) that train step :attr:`step_number`, as
        :attr:`DistributedOptimizer.members`; the root learns them, every local
        process knows them."""
        return self._members.at(self.step_number)

    @property
    def trains(self) -> bool:
        """Whether this machine trains step :attr:`step_number`; if not, every local
        process calls :meth:`wait_out` instead."""
        return self.members.has(self._job.worker_rank)

    def share(self, samples: Optional[int] = None) -> slice:
        """This process's part of step :attr:`step_number`'s global batch of
        ``samples`` samples (default ``job.global_batch``): the machine's share
        among the step's members (:meth:`DistributedOptimizer.share`), cut among
        its local processes in local rank order, as ``psync_worker`` cuts a
        worker's share among its devices. Empty on a step the machine does not
        train."""
        machine = self.members.share(self._job.worker_rank,
                                     self._job.global_batch if samples is None else samples)
        return device_share(machine, self._local.size, self._local.rank)

    def wait_out(self) -> None:
        """On every local process, for a step other machines train: the root waits
        for its result, which every process gets in its parameters (the weights of
        the next step). Raises :class:`OptimizerError` on a step this machine
        trains."""
        if self.trains:
            raise OptimizerError(
                f"wait_out() for step {self.step_number}, which worker {self._job.worker_rank} "
                f"trains (workers {list(self.members.ranks)}): train it and call step()")
        step = self.step_number

        def pull_next() -> int:
            self._host.receive(lambda weights: self._client.pull(step + 1, weights))
            return step + 1

        self.step_number = self._from_root(pull_next, f"waiting out step {step}")

    def leave(self) -> None:
        """On every local process, between steps: the machine leaves the elastic job
        (the root tells the servers, :meth:`DistributedOptimizer.leave`); the
        optimizer is done. Every local process must decide to leave at the same
        step, as a SIGTERM to the machine's processes (torchrun forwards it) makes
        them do. Raises :class:`OptimizerError` in a fixed job."""
        if not self._job.elastic:
            raise OptimizerError(
                f"leave(): worker {self._job.worker_rank}'s job is not elastic (--min_workers=0): "
                f"the other workers would wait for it; restart it instead, or give the job "
                f"--min_workers")
        if self._client is not None:
            self._client.leave()
        self._outputs.left()
        self._finished = True
        self.close()

    @property
    def samples(self) -> int:
        """This process's samples in each backward pass of the current step."""
        return self._samples

    @samples.setter
    def samples(self, n: int) -> None:
        """This step's samples per backward pass (a last, partial batch); back to
        ``job.batch_per_device`` after :meth:`step`."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"samples is {n!r}, expected an int >= 0")
        self._samples = n

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears every registered parameter's gradient (None, or zeros in place), and
        with them the count of the step's backward passes."""
        zero_grad(self._params, set_to_none)
        self._counter.reset()

    def step(self) -> None:
        """Ends step :attr:`step_number` on every local process (a collective: each
        must call it): reduces ``.grad x samples`` and the sample counts to the root,
        which pushes them and pulls the weights of the next step, then broadcasts
        them into every process's parameters, in place, with the root's buffers.

        A parameter without a gradient counts as zeros (a process with
        ``samples = 0`` may skip backward). Raises, before any collective,
        :class:`ParametersChangedError` if a parameter was added, removed,
        replaced or resized since registration,
        :class:`StepWithoutBackwardError` if none has a gradient, and
        :class:`TooFewBackwardPassesError` or :class:`TooManyBackwardPassesError`
        if the backward passes since the last step (or :meth:`zero_grad`) are not
        ``accumulation_steps`` (the count sent would not be their samples');
        raises :class:`psync.Error` if the root's call to the servers failed.
        """
        check_unchanged(self._model, self._names, self._params, self._shapes, "LocalOptimizer")
        grads = [self._gradient(i) for i in range(len(self._params))]
        if self._samples:
            self._check_passes(all(g is None for g in grads))
        with torch.no_grad():
            for view, g in zip(self._grad_views, grads):
                if g is None:
                    view.zero_()
                else:
                    view.copy_(g)
            self._grads.mul_(self._samples)
        self._count.fill_(self._samples * self._job.accumulation_steps)
        dist.reduce(self._grads, ROOT)
        dist.reduce(self._count, ROOT)

        def push_pull() -> int:
            self._host.receive(lambda weights: self._client.push_pull(
                self.step_number, int(self._count.item()), self._grad_views, weights))
            return self.step_number + 1

        try:
            self.step_number = self._from_root(push_pull, f"step {self.step_number}")
        finally:  # the passes were used, or belong to a step the job gave up
            self._counter.reset()
        self._samples = self._job.batch_per_device

    def recover(self) -> int:
        """After a :class:`psync.Error` with code ``'ABORTED'``, on every local process:
        the root registers again; every process gets the weights of the step the job
        resumes from, which it returns (also :attr:`step_number`)."""
        self.step_number = self._join()
        self._samples = self._job.batch_per_device
        self._counter.reset()
        return self.step_number

    def close(self) -> None:
        """Removes the hooks that count backward passes (as :meth:`finish` and
        :meth:`leave` do); the parameters keep their last weights."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._accumulators.clear()

    def finish(self, metrics: Optional[Metrics] = None) -> None:
        """Says this machine trained up to :attr:`step_number` (the root's Finish, which
        waits for the other machines); every local process returns after it. Then
        worker 0's root writes ``--export_path`` and ``--summary`` as
        :meth:`DistributedOptimizer.finish` does, with its own model's buffers."""
        self._outputs.check_metrics(metrics)
        step = self.step_number

        def finish() -> int:
            if self._outputs.writer and self._outputs.narrow_wire:
                self._master = pull_master(self._client, step, self._params)
            self._client.finish(step)
            return step

        self._from_root(finish, "finish", weights=False)
        self._finished = True
        self.close()
        if self._outputs.writer:
            self._outputs.write(step, model_state(self._model, self._master, self._params),
                                metrics)

    def export(self, path: str) -> str:
        """Writes this process's model's ``state_dict()`` to ``path`` now and returns
        the SHA-256 of its data, as :meth:`DistributedOptimizer.export` does; the
        root pulls the master weights for it, the others write what they hold."""
        master = self._master
        if (master is None and not self._finished and self._client is not None
                and self._outputs.narrow_wire):
            master = pull_master(self._client, self.step_number, self._params)
        return save_file(model_state(self._model, master, self._params), path)

    def __enter__(self) -> "LocalOptimizer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Finishes on a clean exit (unless :meth:`finish` was called); after an
        exception the root cancels what is in flight and the exception goes on."""
        if exc_type is None:
            if not self._finished:
                self.finish()
            return
        if self._client is not None:
            self._client.cancel()
        self.close()

    def _check_frozen_alike(self, frozen: List[Tuple[str, str]]) -> None:
        """Raises ValueError on every local process unless each holds the local
        root's frozen parameters (:func:`frozen_digests`), which neither the
        servers nor the root's broadcasts carry; the root's are those the
        servers check. The process that differs names the first tensor."""
        if self._local.is_root:
            text = json.dumps(frozen).encode()
            self._frozen_text = torch.tensor(list(text), dtype=torch.uint8)
            self._frozen_size.fill_(len(text))
        dist.broadcast(self._frozen_size, ROOT)
        if not self._local.is_root:
            self._frozen_text = torch.empty(int(self._frozen_size.item()), dtype=torch.uint8)
        dist.broadcast(self._frozen_text, ROOT)
        roots = dict(json.loads(bytes(self._frozen_text.tolist()).decode()))  # name: digest
        me = f"local rank {self._local.rank}"
        difference = ""
        mine = dict(frozen)
        extra = [name for name in mine if name not in roots]
        other = [name for name in mine if name in roots and roots[name] != mine[name]]
        missing = [name for name in roots if name not in mine]
        if extra:
            difference = f"{me} has frozen parameter '{extra[0]}', which the local root lacks"
        elif other:
            difference = (f"{me}'s frozen parameter '{other[0]}' holds other values than the "
                          f"local root's")
        elif missing:
            difference = f"{me} lacks the local root's frozen parameter '{missing[0]}'"
        self._frozen_flag.fill_(self._local.rank + 1 if difference else 0)
        dist.all_reduce(self._frozen_flag, dist.ReduceOp.MAX)
        differing = int(self._frozen_flag.item()) - 1
        if differing >= 0:
            raise ValueError(
                f"LocalOptimizer: "
                + (difference or f"local rank {differing}'s frozen parameters are not the local "
                                 f"root's")
                + ": frozen parameters (requires_grad=False) are neither trained nor broadcast, "
                  "so every local process must build them alike (seed torch before building "
                  "the model, or load the same values)")

    def _check_passes(self, no_gradient: bool) -> None:
        """Refuses a step of this process whose backward passes are not
        ``accumulation_steps`` (nothing sent yet)."""
        wanted = self._job.accumulation_steps
        # Too many by the most passes one parameter got: calls that reach disjoint
        # parameters (a head each) are not too many.
        passes, most = self._counter.passes, max(self._counter.fired)
        where = f"step() for step {self.step_number} on local rank {self._local.rank}"
        if self._counter.raised is not None:
            raise OptimizerError(
                f"{where} after a backward pass that raised ({self._counter.raised}) having "
                f"reached some parameters, whose gradients are now partial: call opt.zero_grad() "
                f"(the optimizer's, not the model's), then run the step's backward passes again")
        if no_gradient or most == 0:
            raise StepWithoutBackwardError(
                f"{where} without a backward pass: no parameter got a gradient since the "
                f"last step (call loss.backward() first)")
        if passes < wanted:
            raise TooFewBackwardPassesError(
                f"{where} after {passes} backward pass(es), expected {wanted} "
                f"(--accumulation_steps): make {wanted - passes} more and call step() again")
        if most > wanted:
            raise TooManyBackwardPassesError(
                f"{where} after {most} backward passes, expected {wanted} "
                f"(--accumulation_steps): the gradients sum more samples than the step's "
                f"count; call step() after every {wanted} pass(es)")

    def _gradient(self, i: int) -> Optional[torch.Tensor]:
        g = self._params[i].grad
        if g is not None and g.is_sparse:
            raise SparseGradientError(f"parameter {i} of shape {list(g.shape)} has a sparse "
                                      f"gradient, expected a dense one")
        return g

    def _join(self) -> int:
        step = self._from_root(lambda: join(self._client, self._host, self._initial),
                               "registering")
        self._members = self._members_from_root()
        return step

    def _members_from_root(self) -> StepMembers:
        """Who trains each step, as the root's registration said, on every local
        process (a broadcast of its size, then of its numbers)."""
        if self._local.is_root:
            values = members_of(self._client, self._job).encode()
            self._members_values = torch.tensor(values, dtype=torch.float64)
            self._members_size.fill_(len(values))
        dist.broadcast(self._members_size, ROOT)
        if not self._local.is_root:
            self._members_values = torch.empty(int(self._members_size.item()),
                                               dtype=torch.float64)
        dist.broadcast(self._members_values, ROOT)
        return StepMembers.decode(self._members_values.tolist())

    def _from_root(self, action: Callable[[], int], what: str, weights: bool = True) -> int:
        """The root runs ``action`` (a call to the servers returning a step); then
        every local process learns its outcome, raising the root's error where it
        failed, and, with ``weights``, receives the root's parameters. Returns the
        step."""
        error: Optional[BaseException] = None
        if self._local.is_root:
            try:
                with torch.no_grad():
                    self._header.copy_(torch.tensor([0, action(), 0]))
            except Exception as e:  # every local process must hear of it, not time out
                error = e
                text = f"{getattr(e, 'code', 'UNKNOWN')}\n{type(e).__name__}: {e}".encode()
                self._message = torch.tensor(list(text), dtype=torch.uint8)
                self._header.copy_(torch.tensor([1, 0, len(text)]))
        dist.broadcast(self._header, ROOT)
        failed, step, length = self._header.tolist()
        if failed:
            if not self._local.is_root:
                self._message = torch.empty(length, dtype=torch.uint8)
            dist.broadcast(self._message, ROOT)
        if error is not None:
            raise error
        if failed:
            code, _, message = bytes(self._message.tolist()).decode().partition("\n")
            failure = _psync.Error(f"worker {self._job.worker_rank}'s local root (local rank "
                                   f"{ROOT}) failed {what}: {message}")
            failure.code = code
            raise failure
        if weights:
            self._broadcast_weights()
        return step

    def _broadcast_weights(self) -> None:
        """The root's parameters and carried buffers into every local process's, in
        place: one broadcast of their bytes, whatever their dtypes."""
        buffers = [b for _, b in _carried_buffers(self._model)]
        tensors = self._params + buffers
        offsets, size = _byte_offsets(tensors)
        if self._weights.numel() != size:
            self._weights = torch.empty(size, dtype=torch.uint8)
        with torch.no_grad():
            if self._local.is_root:
                # The weights from the client's host copies (the parameters
                # themselves on the CPU): no copy back off a GPU.
                sources = self._host.weights + buffers
                for view, t in zip(_byte_views(self._weights, tensors, offsets), sources):
                    view.copy_(t)
            dist.broadcast(self._weights, ROOT)
            if not self._local.is_root:
                for view, t in zip(_byte_views(self._weights, tensors, offsets), tensors):
                    t.copy_(view)
