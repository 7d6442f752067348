"""The one pipeline every entry point uses: audio -> ASR -> (diarization) -> (post-edit) -> Transcript."""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE, load_audio
from specwhisper.asr.engine import AsrEngine, AsrResult
from specwhisper.audio.clips import ClipMap, clip_spans
from specwhisper.diarize.known import KnownSpeaker, load_known_speakers
from specwhisper.results.transcript import Segment, SpeakerTurn, Transcript
from specwhisper.pipeline.config import PipelineConfig, RunOptions

Progress = Callable[[str, float], None]
# stages whose progress reports come between decoder batches, when nothing of the run is on the model: a
# caller may run other work on the same model inside such a report (the HTTP server's short requests do);
# inside a batch (``SAMPLING``) it may only stop the run; the time spent inside any report is not the run's
# (``timings``)
BETWEEN_BATCHES = frozenset({"transcribe", "resume"})


class TimedReports:
    """The caller's progress callback, with the seconds spent inside it counted (``seconds``)."""

    def __init__(self, progress: Progress | None):
        self.progress = progress
        self.seconds = 0.0

    def __call__(self, stage: str, fraction: float) -> None:
        if self.progress is not None:
            t = time.perf_counter()
            try:
                self.progress(stage, fraction)
            finally:
                self.seconds += time.perf_counter() - t


class Pipeline:
    def __init__(self, config: PipelineConfig | None = None, asr: AsrEngine | None = None):
        from specwhisper.hardware.device import dtype_name, resolve_device, resolve_dtype
        from specwhisper.asr.drafters.choice import decoder_factory  # the speculative engine picks the decoder
        from specwhisper.hardware.threads import configure

        config = config or PipelineConfig()
        device = resolve_device(config.device)
        self.config = replace(config, device=device, dtype=dtype_name(resolve_dtype(config.dtype, device)))
        configure(self.config.threads)
        self.asr = asr or AsrEngine(
            self.config.model,
            cache_dir=self.config.cache_dir,
            device=self.config.device,
            dtype=self.config.dtype,
            decoder_factory=decoder_factory(self.config.draft, self.config.cache_dir, token=self.config.hf_token),
            suppress_numerals=self.config.suppress_numerals,
            token=self.config.hf_token,
        )
        self._diarizer = None
        self._post_editor = None

    # Optional stages load on first use, then stay loaded for the process.
    def diarizer(self):
        if self._diarizer is None:
            from specwhisper.diarize.pipeline import load_diarizer

            self._diarizer = load_diarizer(self.config.diarization_model, token=self.config.hf_token, device=self.config.device)
        return self._diarizer

    def post_editor(self):
        if self._post_editor is None:
            from specwhisper.postedit.editor import load_post_editor

            self._post_editor = load_post_editor(
                self.config.postedit_model,
                drafter=self.config.postedit_drafter,
                max_change=self.config.postedit_max_change,
                device=self.config.device,
                cache_dir=self.config.cache_dir,
                token=self.config.hf_token,
            )
        return self._post_editor

    def run_file(
        self, path: str | Path, options: RunOptions | None = None, progress: Progress | None = None, checkpoint: Path | None = None,
        on_segments: Callable[[list[Segment]], None] | None = None, name: str | None = None,
    ) -> Transcript:
        """``path`` decoded and transcribed (``run``); ``name``: the file's name in messages and the transcript's
        source (default: ``path``)."""
        t = time.perf_counter()
        opts = options or RunOptions()
        audio = load_audio(path, max_seconds=opts.max_audio_s, name=name, channels=opts.multichannel)
        load_s = time.perf_counter() - t
        result = self.run(audio, options, progress, source=name or str(path), checkpoint=checkpoint, on_segments=on_segments)
        result.timings["load_audio"] = round(load_s, 3)
        return result

    def run(
        self,
        audio: np.ndarray,
        options: RunOptions | None = None,
        progress: Progress | None = None,
        source: str | None = None,
        checkpoint: Path | None = None,
        on_segments: Callable[[list[Segment]], None] | None = None,
    ) -> Transcript:
        """``checkpoint``: a file that keeps the ASR's finished chunks, so that an interrupted run of
        the same audio and settings resumes there (specwhisper.pipeline.checkpoint); the caller
        removes it once the transcript is safe. ``on_segments``: ``run_many``'s, for the one file."""
        opts = options or RunOptions()
        opts.validate()
        known = () if opts.multichannel else load_known_speakers(opts.known_speakers)  # a bad clip fails before the ASR runs
        report = TimedReports(progress)
        t = time.perf_counter()
        if checkpoint is not None:  # a batch no memory holds fails before any checkpoint is written
            from specwhisper.asr.batch_memory import fit_batch_size

            fit_batch_size(opts.decode.batch_size, self.asr.runtime, warn=False)
        journal = self._journal(checkpoint, audio, opts) if checkpoint is not None else None
        if opts.multichannel:  # the channels' chunks batched together, the checkpoint keeping the batches of all
            show = None if on_segments is None else (lambda n, segments: on_segments(segments))
            result = self._run_channels([audio], opts, progress, [source], show, journal)[0]
            if journal is not None:
                result.stats.resumed_chunks = journal.resumed_chunks
            return result
        final = None  # with align_text, the pass's text is not the transcript's
        if on_segments is not None and opts.align_text is None:
            final = lambda segments: on_segments(opts.resolved(segments))  # noqa: E731
        asr = self.asr.transcribe(audio, opts.decode_options(), report, journal=journal, on_final=final)
        if journal is not None:
            asr.stats.resumed_chunks = journal.resumed_chunks
        aligned = self._align(audio, asr, opts)
        return self._finish(audio, asr, time.perf_counter() - t - report.seconds, opts, report, source, known, aligned)

    def _align(self, audio: np.ndarray, asr: AsrResult, opts: RunOptions) -> dict | None:
        """With ``align_text``: ``asr``'s segments replaced by the text's, dated (``asr.text_alignment``);
        the alignment's summary for the transcript's ``model``."""
        if opts.align_text is None:
            return None
        from specwhisper.asr.batch_memory import fit_batch_size
        from specwhisper.asr.text_alignment import align_text

        t = time.perf_counter()
        aligned = align_text(self.asr, audio, opts.align_text, asr.segments, asr.chunks, asr.language,
                             fit_batch_size(opts.decode.batch_size, self.asr.runtime, warn=False))
        asr.segments = aligned.segments
        asr.stats.alignment_seconds += time.perf_counter() - t
        return aligned.summary()

    def _journal(self, path: Path, audio: np.ndarray, opts: RunOptions):
        from specwhisper.pipeline.checkpoint import ChunkCheckpoint, audio_identity, checkpoint_key

        decode = opts.decode_options()
        decode.validate(self.asr.special)  # the language as the engine will see it
        settings = {"model": self.asr.model_name, "draft": self.config.draft, "device": self.config.device,
                    "dtype": self.config.dtype, "decode": asdict(decode)}
        if opts.multichannel:  # its records are of every channel's chunks (the same samples as one waveform are not)
            settings["channels"] = list(np.atleast_2d(audio).shape)
        return ChunkCheckpoint.open(path, checkpoint_key(audio_identity(audio), settings))

    def run_many(
        self,
        audios: list[np.ndarray],
        options: RunOptions | None = None,
        progress: Progress | None = None,
        sources: list[str | None] | None = None,
        on_segments: Callable[[int, list[Segment]], None] | None = None,
        texts: list[str] | None = None,
    ) -> list[Transcript]:
        """``run`` for several waveforms, their ASR chunks batched together across files; ``texts``: each
        file's own ``align_text`` (a corpus of recordings and their texts).

        Each file's ``asr`` time is its share of the shared ASR wall time, in proportion to the
        engine time (VAD, encoder, decoder, alignment) attributed to it. ``on_segments(file, segments)``
        gets each file's segments as the ASR makes them final, in order (before diarization and the
        post-edit, which need the whole file; ``AsrEngine.transcribe_many``'s ``on_final``); none with
        ``align_text``, whose segments come once the whole file is heard."""
        opts = options or RunOptions()
        opts.validate()
        if opts.multichannel:
            return self._run_channels(audios, opts, progress, sources, on_segments)
        return self._run_many(audios, opts, progress, sources, on_segments, texts)

    def _run_many(self, audios: list[np.ndarray], opts: RunOptions, progress: Progress | None, sources: list[str | None] | None,
                  on_segments: Callable[[int, list[Segment]], None] | None, texts: list[str] | None = None,
                  journal=None) -> list[Transcript]:
        """``run_many`` of waveforms (``multichannel`` already split into them); ``journal``: their ASR's
        checkpoint (``ChunkCheckpoint``, the batches of all of them)."""
        if texts is not None:
            opts.check_alignment()
        per_file = [opts] * len(audios) if texts is None else [replace(opts, align_text=text) for text in texts]
        known = load_known_speakers(opts.known_speakers)
        report = TimedReports(progress)
        sources = sources or [None] * len(audios)
        t = time.perf_counter()
        final = None
        if on_segments is not None and opts.align_text is None and texts is None:
            final = lambda n, segments: on_segments(n, opts.resolved(segments))  # noqa: E731
        results = self.asr.transcribe_many(audios, opts.decode_options(), report, journal=journal, on_final=final)
        aligned = [self._align(audio, asr, o) for audio, asr, o in zip(audios, results, per_file)]
        wall = time.perf_counter() - t - report.seconds
        work = [r.vad_seconds + r.stats.encoder_seconds + r.stats.decoder_seconds + r.stats.alignment_seconds for r in results]
        total = sum(work) or 1.0
        return [
            self._finish(audio, asr, wall * w / total, o, report, source, known, summary)
            for audio, asr, w, source, summary, o in zip(audios, results, work, sources, aligned, per_file)
        ]

    def _run_channels(self, audios: list[np.ndarray], opts: RunOptions, progress: Progress | None,
                      sources: list[str | None] | None, on_segments: Callable[[int, list[Segment]], None] | None,
                      journal=None) -> list[Transcript]:
        """``multichannel``: every channel of every waveform (channels x samples; a mono one is one channel),
        its bleed of the others muted, transcribed as a file of its own in one shared pass, then each
        waveform's channels merged, each channel a speaker (``pipeline.channels``); ``journal``: the pass's
        checkpoint."""
        from specwhisper.audio.channels import without_bleed
        from specwhisper.pipeline.channels import merge_channels

        split = [without_bleed(np.atleast_2d(audio)) for audio in audios]
        alone = self._run_many([c for channels in split for c in channels],
                               replace(opts, multichannel=False, decode=opts.decode_options()), progress, None, None, journal=journal)
        out, first = [], 0
        for n, (channels, source) in enumerate(zip(split, sources or [None] * len(audios))):
            out.append(merge_channels(alone[first : first + len(channels)], source))
            first += len(channels)
            if on_segments is not None:
                on_segments(n, out[-1].segments)
        return out

    def _finish(
        self, audio: np.ndarray, asr: AsrResult, asr_seconds: float, opts: RunOptions, report: Progress, source: str | None,
        known: tuple[KnownSpeaker, ...] = (), aligned: dict | None = None,
    ) -> Transcript:
        """The stages after ASR (diarization, post-edit) and the Transcript with its timings."""
        duration = len(audio) / SAMPLE_RATE
        timings: dict[str, float] = {}
        timings["asr"] = asr_seconds
        timings["vad"] = asr.vad_seconds
        timings["encoder"] = asr.stats.encoder_seconds
        timings["decoder"] = asr.stats.decoder_seconds
        segments = opts.resolved(asr.segments)
        turns, embeddings = None, None

        if opts.diarize:
            from specwhisper.diarize.attribution import assign_speakers, heard_spans

            t = time.perf_counter()
            heard, words = audio, heard_spans(segments)  # words no turn covers get turns too (specwhisper.diarize.coverage)
            clips = None if opts.decode.clips is None else ClipMap(tuple(clip_spans(opts.decode.clips, len(audio))))
            if clips is not None:  # the clips alone, back to back, as the ASR heard them
                heard, words = clips.joined(audio), [p for a, b in words for p in clips.to_joined(a, b)]
            turns, embeddings = ([], {}) if not len(heard) else self.diarizer().run(
                heard,
                num_speakers=opts.num_speakers,
                min_speakers=opts.min_speakers,
                max_speakers=opts.max_speakers,
                progress=report,
                words=words,
                known=known,
            )
            if clips is not None:
                turns = [SpeakerTurn(a, b, t.speaker) for t in turns for a, b in clips.to_file(t.start, t.end)]
            segments = assign_speakers(segments, turns)
            timings["diarization"] = time.perf_counter() - t

        transcript = Transcript(
            segments=segments,
            language=asr.language,
            duration=duration,
            model={
                "asr": self.asr.model_name,
                "draft": self.config.draft,
                "decoder": type(self.asr.decoder).__name__,
                "task": opts.decode.task,
                "language_probability": asr.language_probability,
                "multilingual": opts.decode.multilingual,
                # lossless: every sample decoded, skipped stretches again; vad-filter: the VAD's speech alone
                "mode": "vad-filter" if opts.decode.vad_filter else "lossless",
                "timestamps": not opts.decode.without_timestamps,
                "diarization": (self.config.diarization_model or "embedded") if opts.diarize else None,
                **({"aligned_text": aligned} if aligned is not None else {}),
                # --draft auto: the candidates, the choice per batch size and why
                **({"auto": self.asr.decoder.summary()} if hasattr(self.asr.decoder, "summary") else {}),
            },
            stats=asr.stats,
            source=source,
            turns=turns,  # kept whole: the RTTM and the speaker list come from them, not from the words
            speaker_embeddings=embeddings if opts.speaker_embeddings else None,
        )
        if opts.postedit:
            t = time.perf_counter()
            transcript, report_pe = self.post_editor().edit_transcript(transcript, progress=report)
            timings["postedit"] = time.perf_counter() - t
            transcript.model["postedit"] = report_pe.to_dict() if hasattr(report_pe, "to_dict") else str(report_pe)
            if turns:  # edited segments get new Word objects: mark their overlaps again
                from specwhisper.diarize.attribution import mark_word_overlaps

                transcript.segments = mark_word_overlaps(transcript.segments, turns)

        total = sum(v for k, v in timings.items() if k in ("asr", "diarization", "postedit"))
        timings["total"] = total
        timings["rtf"] = total / duration if duration else 0.0
        transcript.timings = {k: round(v, 3) for k, v in timings.items()}
        return transcript
