"""The torch side of psync: a client of the parameter servers for a model's tensors.

A :class:`Client` reads the job's configuration as ``psync_worker`` does
(``--config=FILE``, the job's flags, ``--worker_rank``), registers the model's
parameters as the layout (names and shapes, as ``named_parameters()`` gives
them), and moves float32 CPU tensors to and from the servers in place. Every
call that waits releases the GIL. Failures raise :class:`psync.Error` with
the client's message and its status ``code``.

Training a model goes through :func:`init` (the job's configuration) and
:class:`DistributedOptimizer` (gradients pushed from backward's hooks, the
new weights written into the parameters), both re-exported here, and by
:func:`init_local` and :class:`LocalOptimizer` for a machine's several local
processes (one per device) that push as one worker. :func:`save_file` and
:func:`load_file` write and read safetensors, the format of the weights
worker 0 exports at the end (``--export_path``).
"""

from typing import List, Optional, Sequence, Tuple

import torch

from . import _psync

Layout = List[Tuple[str, Tuple[int, ...]]]


def layout_of(module: torch.nn.Module) -> Layout:
    """The (name, shape) of each of ``module``'s parameters, in ``named_parameters()`` order."""
    return [(name, tuple(p.shape)) for name, p in module.named_parameters()]


class Client:
    """One worker's connection to every parameter server of a job.

    Tensors given to its calls are, in layout order, dense contiguous float32
    CPU tensors of the layout's shapes (a wrong one raises TypeError or
    :class:`psync.InvalidArgumentError` naming it). The client copies them
    into its own flat buffers (memory shared with servers on this host) and
    back: it keeps no reference to them past a call, but for the weights of
    :meth:`start_push_pull`, kept until :meth:`wait`.
    """

    def __init__(self, args: Sequence[str], layout: Layout, train_samples: int = 0,
                 unset_init: str = "seed",
                 frozen: Optional[Sequence[Tuple[str, str]]] = None) -> None:
        """Reads the job's configuration from ``args`` (e.g. ``["--config=job.txt",
        "--worker_rank=auto"]``) and makes the layout of ``layout``, the model's
        (name, shape) pairs; ``train_samples`` is the training set's size, which
        the servers' learning-rate schedule counts epochs with. ``unset_init`` is
        where the initial weights come from when the job leaves ``--init_from``
        out: ``"seed"`` (the servers', which :meth:`pull` gives) or ``"worker"``
        (worker 0 sends them with ``push_pull(INITIAL_WEIGHTS_STEP, ...)``, as the
        optimizers do). ``frozen`` are (name, SHA-256) pairs of the tensors the
        worker holds besides the layout's and never sends (:func:`frozen_digests`
        of the model: its frozen parameters); the servers refuse a worker whose
        differ from the job's, naming the tensor. None says nothing of them (a
        tool's client): not checked, and fixing nothing. Nothing is sent before
        :meth:`register`."""
        self._client = _psync.Client(list(args), [(n, list(s)) for n, s in layout], train_samples,
                                     unset_init, None if frozen is None else list(frozen))

    @property
    def layout(self) -> Layout:
        """The layout's (name, shape) pairs."""
        return self._client.tensors

    @property
    def layout_fingerprint(self) -> int:
        """The layout's fingerprint, which every worker and server of the job share."""
        return self._client.layout_fingerprint

    def register(self) -> int:
        """Registers this worker with every server; returns the step training resumes from.

        Call again after any call raised an :class:`psync.Error` with code
        ``'ABORTED'`` (a rollback)."""
        return self._client.register()

    def pull(self, version: int, weights: Sequence[torch.Tensor], precision: str = "wire") -> None:
        """Writes the servers' weights at ``version`` into ``weights`` (one tensor per
        layout entry), in place. ``precision='master'`` gives the servers'
        float32 master weights whatever the wire dtype."""
        self._client.pull(version, list(weights), precision)

    def push_pull(self, step: int, sample_count: int, grads: Sequence[torch.Tensor],
                  weights: Sequence[torch.Tensor]) -> None:
        """Pushes the gradient sums of ``step`` over ``sample_count`` samples and writes
        the weights of version ``step + 1`` into ``weights``, in place."""
        self._client.push_pull(step, sample_count, list(grads), list(weights))

    def start_push_pull(self, step: int, sample_count: int, first_tensor: int,
                        grads: Sequence[torch.Tensor], weights: Sequence[torch.Tensor],
                        grad_scale: float = 1.0) -> None:
        """Starts :meth:`push_pull` for layout tensors ``first_tensor ..
        first_tensor + len(grads) - 1`` and returns at once (the gradients are copied
        before it returns, times ``grad_scale``: a mean's gradient times its sample
        count is their sum; ``grads`` are left as they are); :meth:`wait` writes
        their new weights."""
        self._client.start_push_pull(step, sample_count, first_tensor, list(grads),
                                     list(weights), grad_scale)

    def wait(self) -> None:
        """Waits for every started push-pull and writes their weights in place."""
        self._client.wait()

    def finish(self, version: int) -> None:
        """Says this worker trained every step up to ``version`` and waits for the others."""
        self._client.finish(version)

    def cancel(self) -> None:
        """Makes calls in flight, and later ones, fail (code ``'CANCELLED'``); any thread."""
        self._client.cancel()

    def members(self) -> Optional[List[Tuple[int, List[int], List[float]]]]:
        """Who trains each step, as the servers said at the last :meth:`register`:
        ``(first_step, ranks, weights)`` of the current set of workers, then of the
        one before it where its steps may still be in progress; None where the
        servers named none (see :mod:`psync.elastic`)."""
        return self._client.members()

    def leave(self) -> None:
        """Tells the servers this worker leaves an elastic job after the steps it
        trained (between steps); the others train on without it."""
        self._client.leave()


# The training API over the client (imported last: it builds on Client).
from .elastic import StepMembers, StopOnSignal, WorkerSet  # noqa: E402  pylint: disable=wrong-import-position
from .export import load_file, save_file  # noqa: E402  pylint: disable=wrong-import-position
from .job import Job, init  # noqa: E402  pylint: disable=wrong-import-position
from .local import (  # noqa: E402  pylint: disable=wrong-import-position
    LocalGroup, LocalOptimizer, init_local)
from .optimizer import (  # noqa: E402  pylint: disable=wrong-import-position
    BackwardAfterPushError, DistributedOptimizer, OptimizerError, ParametersChangedError,
    SparseGradientError, StepLostError, StepWithoutBackwardError, TooFewBackwardPassesError,
    TooManyBackwardPassesError, frozen_digests, trainable_parameters)
