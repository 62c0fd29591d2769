"""DistributedOptimizer: a torch model trained by psync's parameter servers.

The optimizer registers the model's trainable parameters as the job's
layout, starts from worker 0's values of them (the default, as DDP starts
from rank 0's; ``--init_from=worker``) or the servers' (``--init_from=seed``),
and then, each step, pushes
every parameter's gradient from a hook on its gradient accumulator the
moment backward has produced it, so communication overlaps the rest of
backward; :meth:`DistributedOptimizer.step` waits for the new weights and
writes them into the parameters in place. Parameters on a CUDA device go
through pinned host copies (:mod:`psync.host`). The update itself (SGD, momentum,
Nesterov, weight decay, Adam, AdamW, warm-up, schedules) is the servers':
no optimizer state lives here. Not thread-safe: one training loop drives it.
"""

import functools
import hashlib
import threading
import weakref
from typing import Callable, List, Optional, Sequence, Set, Tuple

import torch

from . import _psync
from .elastic import StepMembers, WorkerSet, members_of
from .export import Metrics, RunOutputs, model_state, pull_master, save_file
from .host import HostTensors, PendingCopy, check_device
from .job import Job
from .torch import Client


class OptimizerError(RuntimeError):
    """The training loop used the optimizer in a way it cannot serve."""


class StepWithoutBackwardError(OptimizerError):
    """``step()`` came before any backward pass of this step reached a parameter."""


class TooFewBackwardPassesError(OptimizerError):
    """``step()`` came after fewer backward passes than ``accumulation_steps``, with
    the step's sample count left to its default (which counts that many)."""


class TooManyBackwardPassesError(OptimizerError):
    """``LocalOptimizer.step()`` came after more backward passes than
    ``accumulation_steps``: the gradients summed more passes than the count
    sent says."""


class BackwardAfterPushError(OptimizerError):
    """A parameter got a gradient after its push for this step had started (more
    backward passes than ``accumulation_steps`` before ``step()``)."""


class StepLostError(OptimizerError):
    """A backward pass raised after some of the step's gradients had been pushed:
    the servers hold those until the step's others come, and they cannot be
    taken back, so the step cannot be finished; :meth:`DistributedOptimizer.recover`
    (or restarting the process) starts it over."""


class SparseGradientError(OptimizerError, TypeError):
    """A parameter's gradient is sparse (e.g. ``nn.Embedding(sparse=True)``); psync
    pushes dense gradients."""


class ParametersChangedError(OptimizerError):
    """The model's trainable parameters are no longer those registered: one was
    added, removed, replaced, or resized."""


def trainable_parameters(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Parameter]]:
    """``(name, parameter)`` of ``model``'s parameters that require a gradient,
    in ``named_parameters()`` order: what the optimizer registers."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def frozen_digests(model: torch.nn.Module) -> List[Tuple[str, str]]:
    """``(name, SHA-256 in hex)`` of ``model``'s parameters that do not require a
    gradient, in ``named_parameters()`` order: the values (with their dtype and
    shape) that every worker of a job must hold alike, since they are neither
    trained nor sent. The servers compare them at registration."""
    digests = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            continue
        t = p.detach().cpu()
        t = (t.to_dense() if t.is_sparse else t).resolve_conj().resolve_neg().contiguous()
        h = hashlib.sha256(f"{t.dtype} {list(t.shape)}\n".encode())
        h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
        digests.append((name, h.hexdigest()))
    return digests


def checked_parameters(model: torch.nn.Module,
                       who: str) -> List[Tuple[str, torch.nn.Parameter]]:
    """:func:`trainable_parameters`, refused unless there is one at least and each
    is a dense float32 tensor, all on the CPU or all on one CUDA device
    (``who`` names the caller in the error)."""
    named = trainable_parameters(model)
    if not named:
        raise ValueError(f"{who}: the model has no parameter that requires a gradient, "
                         f"expected one at least")
    for name, p in named:
        if p.dtype != torch.float32:
            # Not converted: the servers keep and update float32 weights, and a
            # narrower copy here would silently round every step's weights.
            raise TypeError(f"{who}: parameter '{name}' is {p.dtype}, expected torch.float32 "
                            f"(the servers keep float32 weights): convert the model first, "
                            f"model.float(); --wire_dtype=bf16 or fp16 sends fewer bytes")
        if p.is_sparse:
            raise TypeError(f"{who}: parameter '{name}' is a sparse tensor, expected a dense "
                            f"one")
    check_device(named, who)
    return named


def check_unchanged(model: torch.nn.Module, names: Sequence[str],
                    params: Sequence[torch.nn.Parameter], shapes: Sequence[Tuple[int, ...]],
                    who: str) -> None:
    """Raises :class:`ParametersChangedError` unless ``model``'s trainable parameters
    are still ``params`` (named ``names``, of ``shapes``), those ``who`` registered:
    none added, removed, replaced by another tensor, or resized."""
    now = trainable_parameters(model)
    by_name = dict(now)
    for name, p, shape in zip(names, params, shapes):
        q = by_name.get(name)
        if q is None:
            raise ParametersChangedError(
                f"parameter '{name}' was removed (or stopped requiring a gradient) after "
                f"{who} registered it")
        if q is not p:
            raise ParametersChangedError(
                f"parameter '{name}' was replaced by another tensor after {who} registered "
                f"it; change its values in place (under torch.no_grad()) instead")
        if tuple(p.shape) != tuple(shape):
            raise ParametersChangedError(
                f"parameter '{name}' has shape {list(p.shape)}, registered with "
                f"{list(shape)}")
    registered = set(names)
    for name, _ in now:
        if name not in registered:
            raise ParametersChangedError(
                f"parameter '{name}' was added after {who} registered the model; build the "
                f"model completely before {who}")


def initial_values(job: Job, host: HostTensors) -> Optional[List[torch.Tensor]]:
    """With ``--init_from=worker``, worker 0's model is the job's starting point:
    a CPU copy of its values, kept to be sent again if the servers roll back to
    0; None on any other worker or job."""
    if job.init_from == "worker" and job.worker_rank == 0:
        return host.host_values()
    return None


def accumulator_hook(p: torch.nn.Parameter, hook: Callable[..., None]) -> Tuple[object, object]:
    """Registers ``hook`` on ``p``'s gradient accumulator, which runs once per
    backward pass that reaches ``p``, after ``p.grad`` is updated (torch 1.13
    has no post-accumulate-grad hook on a tensor). Returns the handle and the
    accumulator, which must be kept alive: a hook lives as long as its node.
    Works under ``torch.no_grad()`` too."""
    with torch.enable_grad():
        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
    return accumulator.register_hook(hook), accumulator


class _BackwardCalls:
    """Wraps ``torch.autograd.backward`` (which ``Tensor.backward`` calls) to tell
    a training loop's backward calls from those made inside one: a reentrant
    ``torch.utils.checkpoint`` segment's backward is a call (and a graph task)
    of its own, made while the outer one runs. When an outermost call returns,
    every :class:`PassCounter` it reached counts one pass; when it raises,
    none does. Installed once, by the first counter; the depth is the
    process's, as the inner calls may run on a device's autograd thread."""

    def __init__(self) -> None:
        self.depth = 0
        self.counters: "weakref.WeakSet[PassCounter]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._backward = torch.autograd.backward

        @functools.wraps(self._backward)
        def backward(*args, **kwargs):
            with self._lock:
                self.depth += 1
            error: Optional[BaseException] = None
            try:
                return self._backward(*args, **kwargs)
            except BaseException as e:
                error = e
                raise
            finally:
                with self._lock:
                    self.depth -= 1
                    outermost = self.depth == 0
                if outermost:
                    for counter in list(self.counters):
                        counter.end_call(error)

        torch.autograd.backward = backward


_CALLS: Optional[_BackwardCalls] = None


class PassCounter:
    """Counts the backward passes that reach ``n`` parameters since the last
    :meth:`reset`: :meth:`reached` is called from parameter i's accumulator
    hook. ``passes`` are a training loop's ``backward()`` calls (not the inner
    backward of a checkpointed segment) that reached one and returned;
    ``fired[i]`` those that reached parameter i. A call that raised counts
    for nothing in either; ``raised`` says what the first such call that
    reached a parameter raised, and ``raised_reached`` which parameters the
    calls that raised reached (whose gradients they added to). A backward run
    without ``torch.autograd.backward`` (an engine call of a library's own)
    counts at its graph task's end."""

    def __init__(self, n: int) -> None:
        global _CALLS
        if _CALLS is None:
            _CALLS = _BackwardCalls()
        _CALLS.counters.add(self)
        self._n = n
        self.reset()

    def reset(self) -> None:
        self.passes = 0
        self.fired = [0] * self._n
        self._this_call: List[int] = []  # the parameters the running call reached
        self._queued = False  # a task-end callback is queued (a backward of its own)
        self.raised: Optional[str] = None  # "RuntimeError: ..." of a call that raised
        self.raised_reached: Set[int] = set()

    def reached(self, i: int) -> None:
        self.fired[i] += 1
        if _CALLS.depth > 0:
            self._this_call.append(i)
        elif not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_task)

    def end_call(self, error: Optional[BaseException]) -> None:
        """An outermost ``torch.autograd.backward`` call returned, or raised ``error``."""
        if self._this_call and error is None:
            self.passes += 1
        elif error is not None and self._this_call:
            for i in self._this_call:
                self.fired[i] -= 1
            if self.raised is None:  # the first cause, not the refusals that follow it
                self.raised = f"{type(error).__name__}: {str(error)[:300]}"
            self.raised_reached.update(self._this_call)
        self._this_call = []

    def _end_task(self) -> None:
        self.passes += 1
        self._queued = False


def zero_grad(params: Sequence[torch.Tensor], set_to_none: bool) -> None:
    """Clears each of ``params``' gradients: None, or zeros in place."""
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
        else:
            p.grad.detach_()
            p.grad.zero_()


def join(client: Client, host: HostTensors, initial: Optional[Sequence[torch.Tensor]]) -> int:
    """Registers ``client`` and writes the weights of the step the job resumes from
    into the parameters of ``host``; returns that step. At version 0 of a job
    whose initial weights are worker 0's, worker 0 (``initial`` given) sends them
    (the push of INITIAL_WEIGHTS_STEP, answered with version 0) and the others'
    pulls wait."""
    step = client.register()
    with torch.no_grad():
        if step == 0 and initial is not None:
            host.receive(lambda weights: client.push_pull(_psync.INITIAL_WEIGHTS_STEP, 0,
                                                          list(initial), weights))
        else:
            host.receive(lambda weights: client.pull(step, weights))
    return step


class DistributedOptimizer:
    """Trains ``model`` through the servers of ``job`` (see :func:`psync.torch.init`).

    Construction registers the model's trainable parameters (names and shapes
    from ``named_parameters()``; every worker's must be the same) and writes
    the servers' weights of the step training resumes from into them, in
    place; :attr:`step_number` is that step. A job at step 0 starts from
    worker 0's parameter values (``--init_from`` left out, or ``worker``):
    worker 0 sends them and every other worker pulls them; with
    ``--init_from=seed`` from the servers' values. Parameters
    must be dense float32 tensors, all on the CPU or all on one CUDA device
    (``staged=True`` sends CPU parameters through host copies as CUDA ones
    are, for tests); those with ``requires_grad=False`` are not registered and
    stay as they are.

    Gradients are taken to be of a MEAN loss over this worker's samples of one
    backward pass, ``samples`` of them (:attr:`samples`, by default
    ``job.worker_batch``): each is multiplied by ``samples`` on its way into
    the client's buffer (the gradient sum the servers divide by the step's
    sample count), so the update equals single-process training on the mean
    loss over the global batch. With ``accumulation_steps = K`` a step is K
    backward passes (K micro-batches, each loss a mean over its own
    ``samples``, gradients left to accumulate in ``.grad`` as torch does):
    a parameter is pushed when the K-th pass has produced its gradient.
    """

    def __init__(self, model: torch.nn.Module, job: Job, *, staged: bool = False) -> None:
        self._model = model
        self._job = job
        named = checked_parameters(model, "DistributedOptimizer")
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._shapes = [tuple(p.shape) for p in self._params]
        self._host = HostTensors(self._params, staged)
        self._offsets = [0]  # the layout's float offsets of each parameter, and the end
        for p in self._params:
            self._offsets.append(self._offsets[-1] + p.numel())
        # Worker 0's --export_path and --summary, checked before training starts.
        self._outputs = RunOutputs(job, model, writer=job.worker_rank == 0)
        self._master: Optional[List[torch.Tensor]] = None  # pulled by finish() for the export
        self._finished = False
        self._client = Client(job.args, list(zip(self._names, self._shapes)), job.train_samples,
                              unset_init=job.init_from, frozen=frozen_digests(model))
        self._hooks = []
        self._accumulators = []  # kept alive: a hook lives as long as its node
        self._counter = PassCounter(len(self._params))
        # With --init_from=worker, worker 0's model is the job's starting point;
        # its values are kept to be sent again if the servers roll back to 0.
        self._initial = initial_values(job, self._host)
        self.step_number = self._join()
        self._outputs.start(self.step_number)
        self._reset_step()
        for i, p in enumerate(self._params):
            self._hook(i, p)

    @property
    def job(self) -> Job:
        return self._job

    @property
    def client(self) -> Client:
        """The underlying :class:`psync.torch.Client`."""
        return self._client

    @property
    def samples(self) -> int:
        """This worker's samples in each backward pass of the current step."""
        return self._samples

    @samples.setter
    def samples(self, n: int) -> None:
        """Sets this step's samples per backward pass (a last, partial batch); set it
        before the step's first backward. Back to ``job.worker_batch`` after step()."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"samples is {n!r}, expected an int >= 1")
        if any(self._counter.fired):
            raise OptimizerError(f"samples set to {n} after step {self.step_number}'s backward "
                                 f"began, expected it before the step's first backward")
        self._samples = n

    @property
    def step_samples(self) -> int:
        """The samples this worker's gradients of the current step sum over, sent
        with them: ``samples x accumulation_steps`` unless set."""
        if self._step_samples is not None:
            return self._step_samples
        return self._samples * self._job.accumulation_steps

    @step_samples.setter
    def step_samples(self, n: int) -> None:
        """Sets the current step's count where its backward passes are not all of
        :attr:`samples` (an elastic step's share that ``accumulation_steps`` does
        not divide): each pass's loss is then weighted by its samples over
        :attr:`samples`, so that the gradient times :attr:`samples` is still
        the sum over the pass (see examples/torch/fashion_mnist.py's
        ``train_step``). Set it before the step's first backward; unset after
        step()."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"step_samples is {n!r}, expected an int >= 1")
        if any(self._counter.fired):
            raise OptimizerError(f"step_samples set to {n} after step {self.step_number}'s "
                                 f"backward began, expected it before the step's first backward")
        self._step_samples = n

    @property
    def in_flight(self) -> List[str]:
        """Names of the parameters whose push for this step has started."""
        return [n for n, started in zip(self._names, self._started) if started]

    @property
    def members(self) -> WorkerSet:
        """The workers that train step :attr:`step_number` (every rank in a fixed
        job; in an elastic job, as the servers said at the last registration)."""
        return self._members.at(self.step_number)

    @property
    def trains(self) -> bool:
        """Whether this worker trains step :attr:`step_number`; if not, the loop
        calls :meth:`wait_out` instead of training it."""
        return self.members.has(self._job.worker_rank)

    def share(self, samples: Optional[int] = None) -> slice:
        """This worker's part of step :attr:`step_number`'s global batch of
        ``samples`` samples (default ``job.global_batch``; fewer in an epoch's
        short last step): divided among the step's members by their weights,
        in rank order, as ``psync_worker`` divides it. Empty on a step this
        worker does not train."""
        return self.members.share(self._job.worker_rank,
                                  self._job.global_batch if samples is None else samples)

    def wait_out(self) -> None:
        """Step :attr:`step_number` is trained by other workers (an elastic job's
        step before this worker joined it): waits for it and writes its result,
        the weights of the next step, into the parameters in place. Raises
        :class:`OptimizerError` on a step this worker trains."""
        if self.trains or any(self._counter.fired):
            raise OptimizerError(
                f"wait_out() for step {self.step_number}, which worker {self._job.worker_rank} "
                f"trains (workers {list(self.members.ranks)}): train it and call step()")
        with torch.no_grad():
            self._host.receive(lambda weights: self._client.pull(self.step_number + 1, weights))
        self.step_number += 1
        self._reset_step()

    def leave(self) -> None:
        """Tells the servers this worker leaves the elastic job after the steps it
        trained (call it between steps, as on SIGTERM: see
        :class:`psync.torch.StopOnSignal`); the others train on without it, from
        the next step boundary. Removes the hooks; the optimizer is done, and
        leaving the ``with`` block does not finish. Raises
        :class:`OptimizerError` in a fixed job (the others would wait for this
        worker: it must come back) and in the middle of a step."""
        if not self._job.elastic:
            raise OptimizerError(
                f"leave(): worker {self._job.worker_rank}'s job is not elastic (--min_workers=0): "
                f"the other workers would wait for it; restart it instead, or give the job "
                f"--min_workers")
        if any(self._counter.fired):
            raise OptimizerError(f"leave() in the middle of step {self.step_number} (backward "
                                 f"began): call it between steps")
        self._client.leave()
        self._outputs.left()
        self._finished = True
        self.close()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears every registered parameter's gradient (None, or zeros in place).
        Before the step's first push, the step's backward passes go with them
        (after a backward that raised, say, the step starts again); once a push
        has started they stay, as what was pushed cannot be taken back, and
        after a backward that raised then this raises :class:`StepLostError`."""
        self._check_raised(before="zero_grad")
        zero_grad(self._params, set_to_none)
        if not any(self._started) and not self._copying:
            self._counter.reset()
            self._held = (0, 0)
            self._checked = False

    def step(self) -> None:
        """Ends step :attr:`step_number`: pushes what backward has not yet pushed,
        waits, and writes the weights of the next step into the parameters in place.

        A parameter that no backward pass of this step reached is pushed as
        zeros (its ``.grad`` is ignored): the servers still apply weight decay
        and momentum to it, as ``torch.optim`` does to a zero gradient
        (``zero_grad(set_to_none=False)``). Raises
        :class:`StepWithoutBackwardError` if no backward came since the last
        step, :class:`TooFewBackwardPassesError` if fewer than
        ``accumulation_steps`` did and :attr:`step_samples` was not set (the
        count sent would be that of the passes not made: the update would
        shrink), and :class:`psync.Error` if the servers fail (code
        ``'ABORTED'``: they rolled back; call :meth:`recover`).
        """
        self._check_raised(before="step")
        if not any(self._counter.fired):
            raise StepWithoutBackwardError(
                f"step() for step {self.step_number} without a backward pass: no parameter got "
                f"a gradient since the last step (call loss.backward() first)")
        passes = self._counter.passes
        if passes < self._job.accumulation_steps and self._step_samples is None:
            raise TooFewBackwardPassesError(
                f"step() for step {self.step_number} after {passes} backward pass(es), "
                f"expected {self._job.accumulation_steps} (--accumulation_steps): make "
                f"{self._job.accumulation_steps - passes} more and call step() again; a "
                f"step of fewer passes sets step_samples to its samples before its first "
                f"backward")
        self._start_runs([i for i, started in enumerate(self._started) if not started])
        self._push_copied(block=True)
        self._host.receive(lambda _: self._client.wait())  # into the weights of the pushes
        self.step_number += 1
        self._reset_step()

    def recover(self) -> int:
        """After a :class:`psync.Error` with code ``'ABORTED'`` (the servers rolled
        back) or a :class:`StepLostError`: registers again, writes the weights of
        the step the job resumes from into the parameters, and returns that step
        (also :attr:`step_number`).
        Gradients of the abandoned step are dropped; clear ``.grad`` before the next."""
        try:
            self._client.wait()  # the abandoned step's calls end (with their error)
        except _psync.Error:
            pass
        self.step_number = self._join()
        self._reset_step()
        return self.step_number

    def finish(self, metrics: Optional[Metrics] = None) -> None:
        """Says this worker trained up to :attr:`step_number`, waits for the others
        (the servers' Finish), and removes the hooks. Then worker 0 writes the
        job's ``--export_path`` (the model's ``state_dict()``, parameters with the
        servers' master weights) and ``--summary`` (with ``metrics``, figures of
        the script's own such as ``{"test_accuracy": 0.91}``), if given.
        Raises ValueError or TypeError naming a metric the summary cannot take,
        before anything is sent."""
        self._outputs.check_metrics(metrics)
        if self._outputs.writer and self._outputs.narrow_wire:
            self._master = pull_master(self._client, self.step_number, self._params)
        self._client.finish(self.step_number)
        self._finished = True
        self.close()
        if self._outputs.writer:
            state = model_state(self._model, self._master, self._params)
            self._outputs.write(self.step_number, state, metrics)

    def export(self, path: str) -> str:
        """Writes the model's ``state_dict()`` to ``path`` as safetensors now, on any
        worker, and returns the SHA-256 of its data (see :func:`psync.torch.save_file`).
        With a ``--wire_dtype`` narrower than float32 the parameters' values
        are the servers' master weights of :attr:`step_number`, pulled for it
        (after :meth:`finish`, those worker 0 pulled then; another worker's
        parameters as they are)."""
        master = self._master
        if master is None and not self._finished and self._outputs.narrow_wire:
            master = pull_master(self._client, self.step_number, self._params)
        return save_file(model_state(self._model, master, self._params), path)

    def close(self) -> None:
        """Removes the gradient hooks; the parameters keep their last weights."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._accumulators.clear()

    def __enter__(self) -> "DistributedOptimizer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Finishes on a clean exit (unless :meth:`finish` was called); after an
        exception, cancels what is in flight (nothing waits on it) and lets the
        exception go on."""
        if exc_type is None:
            if not self._finished:
                self.finish()
        else:
            self._client.cancel()
            self.close()

    # The rest runs inside backward (the hooks) or in step().

    def _reset_step(self) -> None:
        n = len(self._params)
        self._counter.reset()      # backward passes: of the step, and of each parameter
        self._started = [False] * n
        self._held = (0, 0)        # the complete parameters [first, end) not yet pushed
        self._copying: List[PendingCopy] = []  # started runs whose gradients are not yet pushed
        self._checked = False
        self._samples = self._job.worker_batch
        self._step_samples: Optional[int] = None

    def _join(self) -> int:
        """Registers and writes the weights of the step the job resumes from into
        the parameters (:func:`join`); learns who trains each step."""
        step = join(self._client, self._host, self._initial)
        self._members: StepMembers = members_of(self._client, self._job)
        return step

    def _hook(self, i: int, p: torch.nn.Parameter) -> None:
        handle, accumulator = accumulator_hook(p, self._on_gradient(i))
        self._hooks.append(handle)
        self._accumulators.append(accumulator)

    def _check_raised(self, before: str) -> None:
        """After a backward pass of this step that raised. Harmless while every
        parameter it reached was pushed already (an extra pass stopped by this
        optimizer's hook, say) or has no counted pass (its ``.grad`` is ignored
        at step(), unless another pass, counted now, adds to it).
        Otherwise :class:`StepLostError` if a push had started (a push made from
        a pass that did not finish, or partial gradients beside pushes that
        cannot be taken back), else an :class:`OptimizerError` unless
        ``before`` is ``zero_grad``, which starts the step again."""
        if self._counter.raised is None:
            return
        k = self._job.accumulation_steps
        fired, started = self._counter.fired, self._started
        unfinished = any(s and f < k for s, f in zip(started, fired))
        partial = any(not started[i] and fired[i] > 0 for i in self._counter.raised_reached)
        if not unfinished and not partial:
            return
        raised, pushed = self._counter.raised, self.in_flight
        if pushed:
            names = ", ".join(f"'{n}'" for n in pushed[:3]) + (", ..." if len(pushed) > 3 else "")
            raise StepLostError(
                f"step {self.step_number} cannot be finished: a backward pass raised ({raised}) "
                f"leaving gradients partial, and the gradients of {len(pushed)} parameter(s) "
                f"({names}) have been pushed, which cannot be taken back. Call opt.recover() "
                f"(or restart this worker process), which registers again and starts step "
                f"{self.step_number} over from the servers' weights, then run it again on the "
                f"same samples: the servers keep the gradients pushed already and ignore "
                f"those parameters' second push")
        if before != "zero_grad":
            raise OptimizerError(
                f"a backward pass of step {self.step_number} raised ({raised}) after reaching "
                f"some parameters, whose gradients are now partial; nothing was pushed: call "
                f"opt.zero_grad() (the optimizer's, not the model's) before {before}, then run "
                f"the step's backward passes again")

    def _on_gradient(self, i: int) -> Callable[..., None]:
        def hook(*_unused) -> None:
            # Counted first: any error below makes this call one that raised,
            # which takes the count back and notes i's gradient as partial.
            self._counter.reached(i)
            if not self._checked:
                check_unchanged(self._model, self._names, self._params, self._shapes,
                                "DistributedOptimizer")  # before this step's first push
                self._checked = True
            self._check_raised(before="another backward pass")
            k = self._job.accumulation_steps
            if self._started[i] or self._counter.fired[i] > k:
                when, now = ((f"after its push for step {self.step_number} started",
                              "this pass counts for nothing") if self._started[i] else
                             (f"in a backward pass beyond step {self.step_number}'s {k}",
                              "this pass added to its gradient, not yet pushed, so call "
                              "opt.zero_grad() and run the step's passes again"))
                raise BackwardAfterPushError(
                    f"parameter '{self._names[i]}' got a gradient {when}: call step() after "
                    f"every {k} backward pass(es) (--accumulation_steps); the losses of one "
                    f"micro-batch go into one backward(), summed; {now}")
            self._check_dense(i)  # as the gradient arrives, whenever it is pushed
            if self._counter.fired[i] == self._job.accumulation_steps and self._job.overlap:
                self._hold(i)
        return hook

    def _hold(self, i: int) -> None:
        """Parameter ``i``'s gradient is complete: it joins the held run of
        complete parameters if it adjoins it (else the held run is pushed and a
        new one starts with it), and the run is pushed once it holds
        ``--overlap_min_kb`` of gradients, as psync_worker's runs are
        (worker/ready_tensors.h); step() pushes what is still held."""
        first, end = self._held
        if first <= i < end:
            return  # held already: a pass that raised after it was held counts for nothing
        if first == end or (i + 1 != first and i != end):
            if first != end:
                self._start_runs(range(first, end))
            first, end = i, i + 1
        else:
            first, end = min(first, i), max(end, i + 1)
        self._held = (first, end)
        if 4 * (self._offsets[end] - self._offsets[first]) >= self._job.overlap_min_kb << 10:
            self._start_runs(range(first, end))
            self._held = (0, 0)

    def _gradient(self, i: int) -> torch.Tensor:
        g = self._params[i].grad if self._counter.fired[i] else None
        if g is None:
            return torch.zeros_like(self._params[i])  # no gradient this step: zeros
        self._check_dense(i)
        return g if g.is_contiguous() else g.contiguous()

    def _check_dense(self, i: int) -> None:
        g = self._params[i].grad
        if g is not None and g.is_sparse:
            raise SparseGradientError(
                f"parameter '{self._names[i]}' has a sparse gradient, expected a dense one "
                f"(e.g. nn.Embedding(sparse=False))")

    def _start_runs(self, indices: Sequence[int]) -> None:
        """Starts the push-pull of the parameters ``indices`` (ascending), one call
        per run of consecutive ones, as soon as their gradients are in host
        memory (at once on the CPU)."""
        runs: List[List[int]] = []
        for i in indices:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        for run in runs:
            self._copying.append(self._host.gradients(run, [self._gradient(i) for i in run]))
            for i in run:
                self._started[i] = True
        self._push_copied(block=False)

    def _push_copied(self, block: bool) -> None:
        """Pushes the started runs whose gradients have reached host memory, in the
        order they started; with ``block``, all of them, waiting for their copies."""
        while self._copying and self._copying[0].ready(block):
            copy = self._copying.pop(0)
            self._client.start_push_pull(
                self.step_number, self.step_samples, copy.indices[0], copy.host,
                [self._host.weights[i] for i in copy.indices], grad_scale=float(self._samples))
