"""openai-whisper's ``load_model`` and ``model.transcribe``, over ``Transcriber``: a script written for
openai-whisper runs on this package by changing its import::

    import specwhisper as whisper                  # was: import whisper

    model = whisper.load_model("base")
    result = model.transcribe("audio.mp3")
    print(result["text"])

``transcribe`` takes openai-whisper's arguments with its defaults (greedy at temperature 0 with the
fallback schedule, each window after the text of the one before) and returns its result: a dict of
``text``, ``segments`` (``id``, ``seek``, ``start``, ``end``, ``text``, ``tokens``, ``temperature``,
``avg_logprob``, ``compression_ratio``, ``no_speech_prob``, ``words`` with ``word_timestamps``) and
``language``, which openai-whisper's own writers (``whisper.utils.get_writer``) write. ``verbose=True``
prints each segment as it becomes final, as openai-whisper does. A decoding option whose value this package
does not offer (a ``prefix``, a ``sample_len``, ...) is a one-line ValueError, never ignored;
``condition_on_previous_text=False`` lets the chunks of a file decode side by side in batches.
"""

from __future__ import annotations

import sys
from typing import Any

from specwhisper.pipeline.api import Audio, Transcriber
from specwhisper.pipeline.faster_whisper import peer_load, peer_options, temperature_options
from specwhisper.results.transcript import segments_to_dicts

# openai-whisper's DecodingOptions that only take their default here: name -> (default, why)
ONLY_DEFAULT = {
    "prompt": (None, "give the text before the first window as initial_prompt"),
    "prefix": (None, "no prefix is forced"),
    "suppress_tokens": ("-1", "the model's own set is suppressed (specwhisper.load(..., suppress_tokens=...))"),
    "suppress_blank": (True, "a blank first token is always suppressed"),
    "max_initial_timestamp": (1.0, "the first timestamp is at most 1 s"),
    "sample_len": (None, "a window writes up to Whisper's 448 tokens"),
    "carry_initial_prompt": (False, "initial_prompt precedes the first window, as openai-whisper's default"),
    "prepend_punctuations": ("\"'“¿([{-", "word timestamps merge openai-whisper's default punctuation"),
    "append_punctuations": ("\"'.。,，!！?？:：”)]}、", "word timestamps merge openai-whisper's default punctuation"),
}
PASSED = ("language", "task", "best_of", "beam_size", "length_penalty", "without_timestamps",
          "compression_ratio_threshold", "logprob_threshold", "no_speech_threshold", "condition_on_previous_text",
          "initial_prompt", "word_timestamps", "hallucination_silence_threshold")


class OpenaiWhisperModel:
    """What openai-whisper's ``load_model`` returns, for its ``transcribe``; ``transcriber``: ours."""

    def __init__(self, transcriber: Transcriber):
        self.transcriber = transcriber

    def transcribe(self, audio: Audio, *, verbose: bool | None = None,
                   temperature: float | tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
                   condition_on_previous_text: bool = True, clip_timestamps: str | list[float] = "0",
                   fp16: bool = True, patience: float | None = None, **options) -> dict:
        """openai-whisper's ``transcribe(model, audio, ...)`` (a numpy array is 16 kHz samples, as there).
        ``fp16``: taken and not needed (the dtype is chosen when the model loads: float16 on a GPU)."""
        # best_of: DecodingOptions' None, one sample per fallback temperature (openai-whisper's CLI asks for 5)
        ours: dict[str, Any] = {"condition_on_previous_text": condition_on_previous_text, "best_of": 1,
                                **temperature_options(temperature)}
        if patience is not None:
            ours["patience"] = patience
        if options.get("best_of", 1) is None:
            options["best_of"] = 1
        ours.update(peer_options(options, "openai-whisper", clip_timestamps, ONLY_DEFAULT, PASSED))
        if hasattr(audio, "detach"):  # a torch tensor of samples, as openai-whisper takes it
            audio = audio.detach().cpu().numpy()
        rate = None if isinstance(audio, (str, bytes)) or hasattr(audio, "__fspath__") else 16000
        stream = self.transcriber.stream(audio, sample_rate=rate, **ours)
        for segment in stream:
            if verbose:
                print(f"[{_stamp(segment.start)} --> {_stamp(segment.end)}] {segment.text}", file=sys.stdout, flush=True)
        result = stream.result
        return {"text": "".join(s.text for s in result.segments), "segments": segments_to_dicts(result.segments),
                "language": result.language}


def load_model(name: str = "base", device: str | None = None, download_root: str | None = None,
               in_memory: bool = False, draft: str = "auto") -> OpenaiWhisperModel:
    """openai-whisper's ``load_model``: the model by its name (``base``, ``large-v3``, a Hugging Face id or a
    folder); ``device`` None: a GPU where one is usable; ``draft``: this package's drafter."""
    return OpenaiWhisperModel(peer_load(name, device, cache_dir=download_root, draft=draft))


def _stamp(seconds: float) -> str:
    """openai-whisper's ``format_timestamp`` of a verbose line: ``MM:SS.mmm`` (``HH:`` from an hour on)."""
    ms = round(seconds * 1000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return (f"{hours:02d}:" if hours else "") + f"{minutes:02d}:{secs:02d}.{ms:03d}"
