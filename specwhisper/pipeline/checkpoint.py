"""Resuming an interrupted long file: each finished batch of ASR chunks, kept on disk.

While a file is transcribed, every batch the ASR engine decodes is appended to a JSON-lines file
next to the outputs (``<outdir>/.<stem>.partial.jsonl``) and fsynced. The next identical run
replays those batches instead of decoding them: the engine's loop runs as before (the same queue,
the same conditioning context, the same re-decoded stretches), only the decode of a recorded batch
is replaced by its record, so decoding continues at the first unfinished batch and the transcript
is identical to an uninterrupted run. The CLI removes the file once the outputs are written.

What a record must reproduce is everything the loop takes from a decode: each chunk's segments
(words, tokens, the window facts), the stretches it queues again with the segment each may replace
(by index when that segment is one of the chunk's own objects, since the loop compares identities),
the attempt's temperature and tokens (conditioning, counters) and the batch's counters.

When a checkpoint is reused (the first line, ``key``):

- the audio: the sha256 of the decoded 16 kHz float32 waveform and its length. It is what the ASR
  reads, so a re-encoded copy of the same samples resumes, and a changed file (same name, size and
  time, or not) does not; hashing 4 h takes about 3 s here (307 MB/s), against 20+ minutes of decoding.
  With ``multichannel``, the channels' samples, and their layout (channels x samples) in the settings.
- the settings: the model (its resolved name), drafter, device and dtype, and every decode option
  (language, task, batch size, VAD threshold, chunk length, word timestamps, beam, fallback rules,
  prompts, conditioning). Batch size, drafter and device are speed settings for the batch runner's
  key (decoding is exact), but here they decide which chunks share a batch, which is what a record
  is keyed on; keeping them is the cautious choice. Diarization and post-edit run after the ASR on
  the whole file and are not part of the checkpoint.

Each record also carries its batch (file index, chunk start, end, depth) and prompt; a record that
does not match the batch the loop is at ends the replay, and the file is cut back to the records
used. A line that does not parse (the process was killed mid-write) ends the records read, and the
file is cut back there before anything is appended.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from specwhisper.asr.decoding.greedy import SequenceResult
from specwhisper.asr.decoding.quality import Attempt
from specwhisper.results.stats import DecodeStats
from specwhisper.results.transcript import Segment, Word
from specwhisper.asr.redecode import Standing
from specwhisper.asr.scheduling import Item
from specwhisper.pipeline.writers import hidden_name

VERSION = 3  # 2: the text a stretch queued again may replace is a list of segments; attempts say if they passed;
# 3: attempts say if their text ends in a loop; standings name their kind


def checkpoint_path(out_dir: str | os.PathLike, stem: str) -> Path:
    """Where the checkpoint of the output ``stem`` lives: a hidden file beside its outputs."""
    return Path(out_dir) / f".{hidden_name(stem)}.partial.jsonl"


def audio_identity(audio: np.ndarray) -> dict:
    """The samples the ASR reads: their count and sha256 (see the module docstring)."""
    samples = np.ascontiguousarray(audio, dtype=np.float32)
    return {"samples": int(samples.size), "sha256": hashlib.sha256(memoryview(samples).cast("B")).hexdigest()}


def checkpoint_key(identity: dict, settings: dict) -> str:
    text = json.dumps({"version": VERSION, "audio": identity, "settings": settings}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(value):
    """numpy scalars as Python numbers, for json."""
    return value.item() if isinstance(value, np.generic) else str(value)


def _segment(d: dict) -> Segment:
    words = [Word(**w) for w in d.get("words", [])]
    return Segment(**{**d, "words": words})


def _item_key(item: Item) -> list[int]:
    i, c = item
    return [i, c.start, c.end, c.depth]


@dataclass
class ChunkCheckpoint:
    """The records of one file's finished batches; ``replay`` and ``record`` are the engine's hooks.

    ``resumed_chunks`` counts chunks taken from the file, ``decoded_chunks`` those decoded (and
    appended) by this run."""

    path: Path
    key: str
    records: deque = field(default_factory=deque)  # (end offset in the file, record) not replayed yet
    used_end: int = 0  # the file's length up to the last record replayed (or the header)
    resumed_chunks: int = 0
    decoded_chunks: int = 0

    @classmethod
    def open(cls, path: str | os.PathLike, key: str) -> ChunkCheckpoint:
        """The records of a previous run with this ``key``, or a new file holding only the header."""
        path = Path(path)
        ckpt = cls(path, key)
        try:
            data = path.read_bytes()
        except OSError:
            data = b""
        offset = 0
        for line in data.split(b"\n")[:-1]:  # the last piece has no newline: torn, or empty
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            if not isinstance(rec, dict) or (offset == 0 and rec.get("key") != key):
                break
            offset += len(line) + 1
            if ckpt.used_end:
                ckpt.records.append((offset, rec))
            else:
                ckpt.used_end = offset  # the header
        if not ckpt.used_end:
            path.parent.mkdir(parents=True, exist_ok=True)
            header = json.dumps({"version": VERSION, "key": key}) + "\n"
            ckpt._write(header, truncate=0)
            ckpt.used_end = len(header.encode())
        elif offset < len(data):
            ckpt._write("", truncate=offset)  # a torn or foreign tail
        return ckpt

    def _write(self, text: str, truncate: int | None = None) -> None:
        """Append ``text``, fsynced; with ``truncate``, cut the file to that many bytes first (0: a new file)."""
        mode = "ab" if truncate is None else "wb" if truncate == 0 else "r+b"
        with open(self.path, mode) as f:
            if truncate:
                f.truncate(truncate)
                f.seek(truncate)
            f.write(text.encode())
            f.flush()
            os.fsync(f.fileno())

    def replay(self, batch: list[Item], prompt: list[int]):
        """The recorded outcome of ``batch`` after ``prompt`` (each chunk's segments, stretches to decode
        again and attempt kept, and the batch's counters), or None: decode it. A mismatch drops the records from there on."""
        if not self.records:
            return None
        end, rec = self.records[0]
        if rec.get("batch") != [_item_key(x) for x in batch] or rec.get("prompt") != list(prompt):
            self._drop_rest()
            return None
        try:
            outcome = self._outcome(batch, rec)
        except (KeyError, TypeError, ValueError, IndexError):
            self._drop_rest()
            return None
        self.records.popleft()
        self.used_end = end
        self.resumed_chunks += len(batch)
        return outcome

    def _drop_rest(self) -> None:
        self.records.clear()
        self._write("", truncate=self.used_end)

    @staticmethod
    def _outcome(batch: list[Item], rec: dict):
        per_chunk, again, attempts = [], [], []
        for (_, chunk), c in zip(batch, rec["chunks"], strict=True):
            segs = [_segment(s) for s in c["segments"]]
            per_chunk.append(segs)
            def standing(d):
                return None if d is None else Standing([segs[s] if isinstance(s, int) else _segment(s) for s in d["segments"]],
                                                      d["kind"], window=chunk if d["kind"] == "earlier" else None)

            again.append([(chunk.part(a, b), standing(d)) for a, b, d in c["skipped"]])
            attempts.append(Attempt(SequenceResult(**c["seq"]), c["temperature"], c["compression_ratio"], c["loops"],
                                    c["passed"], c.get("stock", False)))
        return per_chunk, again, attempts, DecodeStats(**rec["stats"])

    def record(self, batch: list[Item], prompt: list[int], per_chunk, again, attempts, stats: DecodeStats) -> None:
        """Append a decoded batch (one line, fsynced): what ``replay`` needs to stand in for its decode."""
        chunks = []
        for segs, skipped, a in zip(per_chunk, again, attempts):
            def ref(seg):  # one of the chunk's own segments by its index, any other whole
                own = next((k for k, s in enumerate(segs) if s is seg), None)
                return own if own is not None else asdict(seg)

            def standing(st):  # a decode's own standings ("repeated" is FileResults'); an "earlier" one's window is the chunk
                return None if st is None else {"kind": st.kind, "segments": [ref(s) for s in st.segments]}

            chunks.append({"segments": [asdict(s) for s in segs], "skipped": [[c.start, c.end, standing(st)] for c, st in skipped],
                           "seq": asdict(a.seq), "temperature": a.temperature, "compression_ratio": a.compression_ratio,
                           "loops": a.loops, "passed": a.passed, "stock": a.stock})
        rec = {"batch": [_item_key(x) for x in batch], "prompt": list(prompt), "chunks": chunks,
               "stats": {f.name: getattr(stats, f.name) for f in fields(stats)}}
        self._write(json.dumps(rec, default=_plain) + "\n")
        self.decoded_chunks += len(batch)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
