"""Handing back the resident pages of weights that were only read to be copied.

transformers maps a ``model.safetensors`` file into memory and its tensors are views of that
mapping: a page becomes resident (and counts in the process's RSS) when it is first read. Packing
the decoder's matrices for oneDNN (``specwhisper.hardware.kernels``) reads every one of them once, and from then on
only the packed copy is used, yet the file pages stay resident: 75 MB of base's decoder layers and
the 106 MB output head (measured: 189 MB of ``model.safetensors`` resident after loading base).
``release_file_pages`` asks the kernel to reclaim them (``madvise(MADV_PAGEOUT)``, Linux >= 5.4).
The weights stay valid: a later read faults the page in again from the file (the embedding lookup
does, for the few rows a transcript uses). Only pages that lie wholly inside a tensor and inside a
file-backed mapping are touched, so anonymous memory (a model converted in memory) is left alone.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import re
import sys

import torch

MADV_PAGEOUT = 21  # linux/mman.h; unknown to older kernels, which then answer EINVAL (ignored)


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library this process runs on (``madvise``, ``malloc_trim``), looked up once."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def _file_mappings() -> list[tuple[int, int, str]]:
    """Address ranges and paths of this process's file-backed mappings (``/proc/self/maps``)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/"):
                start, end = (int(a, 16) for a in fields[0].split("-"))
                ranges.append((start, end, fields[5].rstrip("\n")))
    return ranges


def release_file_pages(tensors: list[torch.Tensor]) -> int:
    """Reclaim the resident file-backed pages of ``tensors`` (CPU); returns the bytes advised."""
    if not sys.platform.startswith("linux"):
        return 0
    page = mmap.PAGESIZE
    mappings = _file_mappings()
    madvise = _libc().madvise
    advised = 0
    for t in tensors:
        if t.device.type != "cpu" or not t.is_contiguous():
            continue
        start = -(-t.data_ptr() // page) * page
        end = (t.data_ptr() + t.numel() * t.element_size()) // page * page
        if end > start and any(a <= start and end <= b for a, b, _ in mappings):
            if madvise(start, end - start, MADV_PAGEOUT) == 0:
                advised += end - start
    return advised


# The shared libraries a CUDA build of torch loads whether or not a GPU is used (``import torch``).
GPU_LIBRARY = re.compile(r"/lib(cu|nv|nccl|torch_cuda|cudnn|cusparse|cufft|curand|cusolver|cupti|caffe2_nvrtc)[^/]*\.so")


def release_gpu_library_pages() -> int:
    """Reclaim the resident pages of the GPU libraries a CUDA build of torch maps at import, for a
    process that runs on the CPU; returns the bytes advised.

    Why: ``pip install torch`` on Linux gives the CUDA build, and its import leaves 279 MB of those
    libraries' file pages resident (measured: 707 MB of RSS after ``import torch``, 428 MB after
    this; nvJitLink, nvrtc and cublasLt 71 MB each, libtorch_cuda 36 MB), which a CPU run never
    executes: a third of the 1.5 GB budget for base on a 10-minute file. The pages are clean
    file-backed ones, so a later GPU call faults them in again and nothing can break."""
    return _release_libraries(GPU_LIBRARY)


# torch's own CPU libraries: loading them runs the static registration of every operator, which
# touches far more of their pages than a decode executes again.
TORCH_CPU_LIBRARY = re.compile(r"/libtorch_(cpu|python)\.so")


def release_torch_import_pages() -> int:
    """Reclaim the resident pages of torch's CPU libraries once the models are loaded; the pages a
    decode runs fault in again from the page cache. Returns the bytes advised.

    Measured on base (this CPU, 10-minute talk): 175 MB of ``libtorch_cpu.so`` resident after
    loading, 78 MB less RSS right after the call, the decode's peak 1264 MB against 1301 MB without
    it, and no slower (in process, alternated: 45.0 / 44.0 s against 45.1 / 43.9 s)."""
    return _release_libraries(TORCH_CPU_LIBRARY)


def _release_libraries(pattern: re.Pattern) -> int:
    """``madvise(MADV_PAGEOUT)`` on every file mapping whose path matches ``pattern``; the bytes advised."""
    if not sys.platform.startswith("linux"):
        return 0
    madvise = _libc().madvise
    advised = 0
    for start, end, path in _file_mappings():
        if pattern.search(path) and madvise(start, end - start, MADV_PAGEOUT) == 0:
            advised += end - start
    return advised


def trim_heap() -> None:
    """Give the freed memory glibc keeps in its heaps back to the kernel (``malloc_trim``).

    glibc raises its mmap threshold to the size of the last large block freed (up to 32 MB), so the
    temporaries of the VAD and of a batch (1-25 MB each) come from the heap afterwards and stay
    there when freed. Measured on a 10-minute file: 83 MB kept after the VAD, and the peak during
    the decode 70-100 MB higher without a trim after the VAD and after each batch. A trim takes a
    few milliseconds. No-op where the C library has no ``malloc_trim``."""
    try:
        trim = _libc().malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
