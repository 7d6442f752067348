"""The torch device a user names (``--device``), checked before any model loads."""

from __future__ import annotations

import platform

import torch

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` when a CUDA GPU is usable, else ``cpu``; ``cpu``; ``cuda`` / ``cuda:N`` when
    that GPU exists. Anything else, or a GPU that is not there, is a one-line ``ValueError`` (left to
    torch, it is a traceback from deep inside the first model load)."""
    name = (name or "").strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return name
    if name == "cuda" or name.startswith("cuda:"):
        index = name.partition(":")[2]
        if index and not index.isdigit():
            raise ValueError(f"unknown device '{name}' ({DEVICE_CHOICES})")
        if not torch.cuda.is_available():
            raise ValueError(f"device '{name}': no CUDA GPU is usable here (no NVIDIA driver or GPU, or a CPU-only torch)")
        if index and int(index) >= torch.cuda.device_count():
            raise ValueError(f"device '{name}': this machine has {torch.cuda.device_count()} CUDA GPU(s)")
        return name
    raise ValueError(f"unknown device '{name}' ({DEVICE_CHOICES})")


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPE_CHOICES = "auto, float32, float16 or bfloat16"


def resolve_dtype(name: str, device: "str | torch.device") -> torch.dtype:
    """``auto`` -> float16 on a GPU, float32 on the CPU; ``float32``, ``float16`` (GPU only: torch's CPU
    half-precision products are slow or missing), ``bfloat16``. A one-line ``ValueError`` otherwise."""
    name, device = (name or "").strip().lower(), str(device)
    if name == "auto":
        return torch.float16 if device.startswith("cuda") else torch.float32
    if name not in DTYPES:
        raise ValueError(f"unknown dtype '{name}' ({DTYPE_CHOICES})")
    if name == "float16" and not device.startswith("cuda"):
        raise ValueError(f"dtype float16 needs a GPU (device '{device}'): use float32 or bfloat16 on the CPU")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return next(k for k, v in DTYPES.items() if v == dtype)


def synchronize(device: torch.device | str) -> None:
    """Wait for the work queued on ``device``. A GPU runs a call's kernels after the call returns, so a
    clock read without this times their launch alone (``--draft auto``'s costs on an H100 would have been
    a CUDA graph's launch, the same for every pass width). Nothing on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def on_device(data, device: torch.device | str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.tensor(data, device=device)`` without waiting for the device. torch copies pageable host
    memory to a GPU synchronously, so every such call inside a step waited for all the work queued
    before it, and the kernels after it were launched only then (on an H200: 133 waits in 29
    plain steps of base, where the one token read per step needs one); from pinned memory the copy is
    queued like a kernel. Elsewhere it is ``torch.tensor``. The host tensor is made on the CPU by name:
    under a ``with torch.device("cuda")`` block torch would make it on the GPU, which cannot be pinned."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.tensor(data, device=device, dtype=dtype)
    return torch.tensor(data, dtype=dtype, device="cpu").pin_memory().to(device, non_blocking=True)


class HostCopy:
    """A small device tensor on its way to the host without making the host wait for it: on a GPU a copy
    into pinned memory, queued behind the work that computes it, and :meth:`ready` once it has landed
    (an event query, no wait); on the CPU the tensor itself, ready at once."""

    def __init__(self, tensor: torch.Tensor):
        self._event = None
        if tensor.device.type != "cuda":
            self.value = tensor
            return
        self.value = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=True)
        self.value.copy_(tensor, non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record()

    def ready(self) -> bool:
        return self._event is None or self._event.query()


def device_label(device: torch.device | str) -> str:
    """What a timing on ``device`` depends on, in words: the GPU's name, or the CPU's model and the threads
    torch runs with (a cost measured with 2 threads says nothing of 16)."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    threads = torch.get_num_threads()
    return f"{model}, {threads} thread{'s' * (threads != 1)}, torch {torch.__version__}"
