"""Choosing the decoder: plain greedy or speculative with a drafter (see asr/speculative.py)."""

from __future__ import annotations

from pathlib import Path

from asr.decoding import Decoder, GreedyDecoder

DRAFT_CHOICES = ("auto", "none")


def decoder_factory(draft: str, cache_dir: Path | None = None):
    """Return a function building the decoder for an engine, per ``--draft``."""

    def build(engine) -> Decoder:
        if draft in ("none", "auto"):
            return GreedyDecoder(engine.runtime, engine.special, engine.rules)
        raise ValueError(f"unknown drafter '{draft}'")

    return build
