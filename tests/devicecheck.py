"""Host/device mixing caught without a GPU: a second device simulated on the CPU.

On CUDA, a tensor made on the host (``torch.tensor(ids)`` without ``device=``) that meets a model's
weights in an operation fails ("Expected all tensors to be on the same device"). On a CPU-only
machine both are CPU tensors and nothing fails, so such code passes every CPU test and breaks the
first GPU user. ``HostDeviceMode`` (a ``TorchFunctionMode``) tags every tensor as host or device as
CUDA would place it and raises ``HostDeviceMix`` where CUDA would raise:

- factory functions (``torch.tensor``, ``arange``, ``zeros``, ``full``, ``from_numpy``, ...) make host
  tensors unless given ``device=`` (the code under test passes the model's device, here ``cpu``);
- ``.to(device)``/``.cuda()`` make device tensors, ``.cpu()`` host ones;
- tensors that exist before the mode (weights, inputs given to the code) are device tensors, except
  ``host`` ones named at entry;
- code that runs on the host by design (``HOST_CODE``: the VAD, the log-mel feature extractor, whose
  output the engine moves to the device) makes host tensors and is not checked;
- any other operation with a host tensor of one element or more next to a device tensor is a mix
  (a 0-dim host tensor is allowed next to device ones, as CUDA allows CPU scalars); its output is a
  device tensor if any input is, else a host one. Copying a host tensor into a device one
  (``dev[i] = host``, ``copy_``) is legal and counted as a transfer, and so are reads of device
  values on the host (``tolist``, ``item``, ``int``/``float``/``bool``, ``.cpu()``);
- host data made straight into a device tensor (``torch.tensor(ids, device=...)``) is counted as a
  blocking copy: CUDA copies pageable memory synchronously, a wait for the GPU
  (``specwhisper.hardware.device.on_device`` queues it instead).
"""

from __future__ import annotations

import sys
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

_HOST = "_specwhisper_host"

FACTORIES = {torch.tensor, torch.as_tensor, torch.arange, torch.zeros, torch.ones, torch.full, torch.empty,
             torch.from_numpy, torch.randn, torch.rand, torch.randint, torch.linspace, torch.eye, torch.asarray}
TO_HOST = {torch.Tensor.cpu, torch.Tensor.numpy}
READS = {torch.Tensor.tolist, torch.Tensor.item, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__bool__,
         torch.Tensor.__index__, torch.Tensor.cpu}
COPIES = {torch.Tensor.__setitem__, torch.Tensor.copy_}
# reading a property or a size is no operation on the data
IGNORED = {torch.Tensor.shape.__get__, torch.Tensor.device.__get__, torch.Tensor.dtype.__get__, torch.Tensor.size,
           torch.Tensor.dim, torch.Tensor.numel, torch.Tensor.__len__, torch.Tensor.ndim.__get__,
           torch.Tensor.is_cuda.__get__, torch.Tensor.requires_grad.__get__, torch.Tensor.data_ptr,
           torch.Tensor.element_size, torch.Tensor.stride, torch.Tensor.is_contiguous}


# tensors made from host data: ``torch.tensor(ids, device=cuda)`` copies pageable memory synchronously,
# a wait for the GPU; ``specwhisper.hardware.device.on_device`` queues the copy instead
FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray}
QUEUED_COPY = ("specwhisper/hardware/device.py",)

HOST_CODE = ("specwhisper/audio/vad.py", "transformers/models/whisper/feature_extraction_whisper.py", "transformers/audio_utils.py")


def _called_from(files: tuple[str, ...], start: int = 2, depth: int = 12) -> bool:
    """Whether the torch call being checked came (within ``depth`` frames) from one of ``files``;
    ``start``: the frames between here and the torch call's caller."""
    f = sys._getframe(start)
    for _ in range(depth):
        if f is None:
            return False
        if f.f_code.co_filename.endswith(files):
            return True
        f = f.f_back
    return False


def _in_host_code() -> bool:
    return _called_from(HOST_CODE, start=3)


class HostDeviceMix(RuntimeError):
    """An operation CUDA would refuse: a host tensor next to a device tensor."""


def is_host(t: torch.Tensor) -> bool:
    return getattr(t, _HOST, False)


def _mark(out, host: bool) -> None:
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor):
            try:
                setattr(t, _HOST, host)
            except (AttributeError, RuntimeError):
                pass


class HostDeviceMode(TorchFunctionMode):
    def __init__(self, host: tuple[torch.Tensor, ...] = ()):
        super().__init__()
        self.host_at_entry = list(host)
        self.transfers: Counter[str] = Counter()
        self.blocking_copies = 0  # host data made into a device tensor at once: on CUDA a copy that waits

    def __enter__(self):
        for t in self.host_at_entry:
            setattr(t, _HOST, True)
        return super().__enter__()

    def __exit__(self, *exc):
        for t in self.host_at_entry:
            setattr(t, _HOST, False)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in IGNORED:
            return func(*args, **kwargs)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        out = func(*args, **kwargs)
        if _in_host_code():
            _mark(out, True)
            return out
        name = getattr(func, "__qualname__", getattr(func, "__name__", str(func)))
        if func in FACTORIES:
            _mark(out, kwargs.get("device") is None)
            if func in FROM_DATA and kwargs.get("device") is not None and args and not isinstance(args[0], torch.Tensor) \
                    and not _called_from(QUEUED_COPY):
                self.blocking_copies += 1
            return out
        if func in READS and tensors and not is_host(tensors[0]):
            self.transfers[name] += 1
        if func in TO_HOST:
            if func is torch.Tensor.numpy and tensors and not is_host(tensors[0]):
                raise HostDeviceMix("Tensor.numpy() on a device tensor (CUDA needs .cpu() first)")
            _mark(out, True)
            return out
        if func in (torch.Tensor.to, torch.Tensor.cuda):
            moved = func is torch.Tensor.cuda or any(isinstance(a, (str, torch.device)) for a in list(args[1:]) + list(kwargs.values()))
            moved = moved or any(isinstance(a, torch.Tensor) and not is_host(a) for a in list(args[1:]) + list(kwargs.values()))
            _mark(out, False if moved else is_host(args[0]))
            return out
        if func in COPIES:
            dest, src = tensors[0], tensors[1:]
            if not is_host(dest) and any(is_host(s) for s in src):
                self.transfers[name] += 1
            return out
        host = [t for t in tensors if is_host(t)]
        device = [t for t in tensors if not is_host(t)]
        if any(t.dim() > 0 for t in host) and device:
            shapes = [tuple(t.shape) for t in host if t.dim() > 0]
            raise HostDeviceMix(f"{name}: host tensor(s) {shapes} next to device tensor(s) {[tuple(t.shape) for t in device]}")
        if tensors:
            _mark(out, not device)
        return out
