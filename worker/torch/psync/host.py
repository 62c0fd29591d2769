"""Host copies of a model's parameters, for parameters on a GPU.

psync's client reads gradients from and writes weights into float32 CPU
memory. Parameters on the CPU are that memory themselves. Parameters on a
CUDA device each get two pinned host tensors, one for the gradient and one
for the weights: a gradient is copied out asynchronously on the stream
backward computed it on (an event says when the copy is done, so the push
starts without stalling the queue of kernels), and after the pull the new
weights are copied back into the parameters in place, queued on the current
stream before any kernel that reads them. ``staged=True`` takes the same
path for CPU parameters (plain copies, no events): the tests exercise the
GPU path's bookkeeping with it on machines without a GPU.
"""

from typing import Callable, List, Optional, Sequence, Tuple

import torch


def check_device(named: Sequence[Tuple[str, torch.Tensor]], who: str,
                 what: str = "parameter") -> None:
    """Raises TypeError unless the tensors of ``named`` (name, tensor) are all on the
    CPU or all on one CUDA device, naming the first that is not (``who`` names
    the caller, ``what`` the kind of tensor; the first of ``named`` is always a
    parameter)."""
    first_name, first = named[0]
    for name, p in named:
        if p.device.type not in ("cpu", "cuda"):
            raise TypeError(f"{who}: {what} '{name}' is on {p.device}, expected the CPU or "
                            f"a CUDA device")
        if p.device != first.device:
            raise TypeError(f"{who}: {what} '{name}' is on {p.device} and parameter "
                            f"'{first_name}' on {first.device}, expected one device: each "
                            f"process trains one replica of the model on one device")


def _event(device: Optional[torch.device]) -> Optional["torch.cuda.Event"]:
    """A CUDA event recorded now on ``device``'s current stream; None on the CPU."""
    if device is None:
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


class PendingCopy:
    """Gradients on their way to host memory: done once :meth:`ready` says so."""

    def __init__(self, indices: Sequence[int], host: List[torch.Tensor],
                 event: Optional["torch.cuda.Event"]) -> None:
        self.indices = list(indices)
        self.host = host
        self._event = event

    def ready(self, block: bool) -> bool:
        """Whether the copies are done; with ``block``, waits for them first (the
        GIL released)."""
        if self._event is None:
            return True
        if block:
            self._event.synchronize()
            return True
        return self._event.query()


class HostTensors:
    """Where the client reads each parameter's gradient and writes its weights."""

    def __init__(self, params: Sequence[torch.Tensor], staged: bool = False) -> None:
        """``params`` are on one device (:func:`check_device`): host copies where it
        is a CUDA one (or with ``staged``), the parameters themselves on the CPU."""
        self._params = list(params)
        device = self._params[0].device
        self._device = device if device.type == "cuda" else None
        self.staged = self._device is not None or staged
        self._written: Optional["torch.cuda.Event"] = None  # the last weights copied in
        self._grads: List[torch.Tensor] = []  # made at the first gradients()
        self.weights = [self._host_tensor(p) for p in self._params] if self.staged \
            else self._params

    def _host_tensor(self, p: torch.Tensor) -> torch.Tensor:
        return torch.empty(p.shape, dtype=torch.float32, pin_memory=self._device is not None)

    def gradients(self, indices: Sequence[int], grads: Sequence[torch.Tensor]) -> PendingCopy:
        """Starts moving ``grads`` (of parameters ``indices``) where the client reads
        them: the host copies' data once :meth:`PendingCopy.ready`; the
        gradients themselves where not staged."""
        if not self.staged:
            return PendingCopy(indices, list(grads), None)
        if not self._grads:
            self._grads = [self._host_tensor(p) for p in self._params]
        host = [self._grads[i] for i in indices]
        with torch.no_grad():
            for h, g in zip(host, grads):
                h.copy_(g, non_blocking=True)
        return PendingCopy(indices, host, _event(self._device))

    def receive(self, call: Callable[[List[torch.Tensor]], object]) -> None:
        """Runs ``call(weights)``, a call of the client that writes the weights it
        is given (a pull, a wait), once the last weights copied into the
        parameters have left the host copies; then copies the new ones in."""
        if self._written is not None:
            self._written.synchronize()
            self._written = None
        call(self.weights)
        if not self.staged:
            return
        with torch.no_grad():
            for p, h in zip(self._params, self.weights):
                p.copy_(h, non_blocking=True)
        self._written = _event(self._device)

    def host_values(self) -> List[torch.Tensor]:
        """New CPU tensors holding the parameters' values now."""
        with torch.no_grad():
            return [p.detach().to("cpu", copy=True) for p in self._params]
