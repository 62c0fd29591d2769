"""What a torch job leaves behind: the model's final weights and the run's summary.

As ``psync_worker`` does, worker 0 writes, when training finishes, the
model's whole ``state_dict()`` as safetensors to ``--export_path`` (the
parameters with the servers' float32 master weights of the last step, the
buffers as worker 0's model holds them) and one JSON line to ``--summary``:
the keys of ``psync_worker``'s summary, ``torch_version``, then the figures
the script passes to ``finish(metrics=...)``. Both files are replaced
atomically. :func:`save_file` and :func:`load_file` write and read the
format through psync's C++ code (common/format/safetensors.h), so that
``model.load_state_dict(load_file(path))`` restores an exported model.
"""

import math
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence

import torch

from . import _psync
from .job import Job

Metrics = Mapping[str, object]


def save_file(tensors: Mapping[str, torch.Tensor], path: str) -> str:
    """Writes ``tensors`` (a ``state_dict``, say) to ``path`` as safetensors, in the
    mapping's order, atomically (a temporary file beside it, renamed over it).

    Tensors may be float64, float32, float16, bfloat16, int64, int32, int16,
    int8, uint8 or bool; non-contiguous ones and those on another device are
    copied to contiguous CPU memory first. Returns the SHA-256 (hex) of the
    data written, every tensor's bytes in order. Raises TypeError naming a
    tensor of another dtype, :class:`psync.Error` naming the path if it
    cannot be written."""
    return _psync.save_file(_plain(tensors), str(path))


def load_file(path: str) -> Dict[str, torch.Tensor]:
    """Reads a safetensors file into new CPU tensors of its dtypes and shapes, in
    the file's order: ``model.load_state_dict(load_file(path))``. Raises
    :class:`psync.Error` naming the path for a missing file (code
    ``'NOT_FOUND'``), :class:`psync.InvalidArgumentError` for a malformed one."""
    return _psync.load_file(str(path))


def _plain(tensors: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Detached, contiguous CPU tensors, under the same names."""
    out = {}
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor):
            t = t.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            t = t.contiguous()
        out[name] = t  # anything else is refused, by name, by the extension
    return out


def model_state(model: torch.nn.Module,
                master: Optional[Sequence[torch.Tensor]] = None,
                params: Sequence[torch.Tensor] = ()) -> Dict[str, torch.Tensor]:
    """``model.state_dict()``, with ``master[i]`` in place of ``params[i]`` wherever
    the state holds that parameter (a parameter shared by two modules is under
    both names)."""
    replace = {id(p): m for p, m in zip(params, master)} if master is not None else {}
    state = model.state_dict(keep_vars=True)
    return _plain({name: replace.get(id(t), t) for name, t in state.items()})


def pull_master(client, step: int, params: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The servers' float32 master weights of ``step``, in new CPU tensors shaped as
    ``params``."""
    master = [torch.empty(p.shape, dtype=torch.float32) for p in params]
    client.pull(step, master, precision="master")
    return master


class RunOutputs:
    """The ``--export_path`` and ``--summary`` of one optimizer.

    ``writer`` says whether this process writes them (worker 0, or worker 0's
    local root); its paths are checked at once, so that a bad one fails in
    seconds, not after training. Not thread-safe."""

    def __init__(self, job: Job, model: torch.nn.Module, writer: bool) -> None:
        self._job = job
        self._model_name = "torch:" + type(model).__qualname__
        self.writer = writer and bool(job.export_path or job.summary)
        if self.writer and job.export_path:
            _psync.check_output_path("--export_path", job.export_path)
        if self.writer and job.summary:
            _psync.check_output_path("--summary", job.summary)
        self._first_step = 0
        self._start = time.monotonic()

    def left(self) -> None:
        """This worker left the elastic job before its end: if it is the writer,
        says on stderr what is written only if it joins again, and where the
        final weights are otherwise (as psync_worker's worker 0 says)."""
        if not self.writer:
            return
        job = self._job
        outputs = [f"{flag} ({path})" for flag, path in
                   (("--export_path", job.export_path), ("--summary", job.summary)) if path]
        otherwise = (f"Otherwise the final weights are in the servers' newest checkpoint once they "
                     f"stop: psync_ckpt export --checkpoint_dir={job.checkpoint_dir} --out=FILE "
                     f"writes them" if job.checkpoint_dir else
                     "Otherwise, without --checkpoint_dir, the final weights are lost once the "
                     "servers stop")
        print(f"psync: worker 0 left the job before its end; only worker 0 writes "
              f"{' and '.join(outputs)}, so they are written only if it joins again before the "
              f"end. {otherwise}", file=sys.stderr, flush=True)

    def start(self, step: int) -> None:
        """Training starts at ``step`` now: the summary's speed counts from here."""
        self._first_step = step
        self._start = time.monotonic()

    @property
    def narrow_wire(self) -> bool:
        """Whether the parameters hold their wire dtype's rounding of the servers'
        master weights (``--wire_dtype`` narrower than float32), so that an export
        pulls the masters."""
        return self._job.wire_dtype != "float32"

    def check_metrics(self, metrics: Optional[Metrics]) -> None:
        """Raises ValueError or TypeError naming a metric the summary cannot take."""
        self._summary(self._first_step, "", metrics)

    def write(self, step: int, state: Dict[str, torch.Tensor],
              metrics: Optional[Metrics]) -> None:
        """Writes ``state`` (:func:`model_state`) and the summary of a run that ended at
        ``step``, where this process is the writer."""
        if not self.writer:
            return
        job = self._job
        if job.export_path:
            digest = _psync.save_file(state, job.export_path, "--export_path")
            print(f"psync: wrote weights to {job.export_path} (sha256 {digest})",
                  file=sys.stderr, flush=True)
        else:
            digest = _psync.tensors_sha256(state)
        if job.summary:
            _psync.write_text_file("--summary", job.summary, self._summary(step, digest, metrics))

    def _summary(self, step: int, digest: str, metrics: Optional[Metrics]) -> str:
        trained = step - self._first_step
        elapsed = time.monotonic() - self._start
        rate = self._job.global_batch * trained / elapsed if trained > 0 and elapsed > 0 \
            else math.nan
        return _psync.run_summary(list(self._job.args), self._job.train_samples, step, rate,
                                  digest, self._model_name, dict(metrics or {}))
