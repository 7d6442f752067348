"""Writing a ``.safetensors`` file a tensor at a time.

safetensors' own writers (``save_file``, ``serialize_file``) take every tensor at once, so converting a model
held all of it in memory: a large-v3 faster-whisper folder (2.9 GB of float16) peaked at 4.1 GB. Knowing the
shapes first, the header can be written first and each tensor after it as it is made, so that converting holds
one layer (bench/results/ct2_conversion.json). The file is the format's own (safetensors/docs: an 8-byte
little-endian header size, the JSON header padded with spaces, then the tensors' bytes back to back in the
header's order); safetensors' reader and transformers read it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

# numpy dtypes -> safetensors' dtype names (safetensors/src/tensor.rs, Dtype)
_NAMES = {np.dtype(t).newbyteorder("<"): name for t, name in [
    (np.float32, "F32"), (np.float16, "F16"), (np.float64, "F64"), (np.int8, "I8"), (np.uint8, "U8"),
    (np.int16, "I16"), (np.int32, "I32"), (np.int64, "I64"), (np.bool_, "BOOL")]}


def write_streamed(path: Path, shapes: Mapping[str, tuple[int, ...]], dtype: np.dtype,
                   tensors: Iterable[tuple[str, np.ndarray]], metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (name, array), which must come in the order and with the shapes of ``shapes``, as
    ``dtype`` to ``path``. A tensor out of that plan raises ValueError and the file is left incomplete: write it
    under a temporary name."""
    dtype = np.dtype(dtype).newbyteorder("<")
    if dtype not in _NAMES:
        raise ValueError(f"safetensors has no dtype for {dtype}")
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, shape in shapes.items():
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        header[name] = {"dtype": _NAMES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the tensors start 8-byte aligned, as safetensors' own writer places them
    planned = iter(shapes.items())
    with Path(path).open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, value in tensors:
            want = next(planned, None)
            if want is None or want[0] != name or tuple(value.shape) != tuple(want[1]):
                raise ValueError(f"tensor {name} {tuple(value.shape)} is not the one planned next ({want})")
            f.write(memoryview(np.ascontiguousarray(value, dtype=dtype)).cast("B"))
        missing = next(planned, None)
        if missing is not None:
            raise ValueError(f"tensor {missing[0]} was planned but never came")
