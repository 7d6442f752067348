"""Speech recognition: audio, VAD, Whisper models and (speculative) decoding."""

from asr.threads import set_wait_policy

# Before any module of this package imports torch: its OpenMP runtime reads the wait policy once, at load.
set_wait_policy()
