"""``transcribe --live FILE``: play a file through the live engine in real time, printing confirmed
text as it comes, and write the usual formats at the end (specwhisper.live.stream). ``transcribe - --live``
listens to standard input as it arrives instead (a microphone's pipe; ``serving.cli.stdio.StdinAudio``),
until it ends or the first Ctrl-C."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from specwhisper.audio.loading import SAMPLE_RATE, check_length, load_audio, over_limit
from specwhisper.live.replay import Replay, listen, replay
from specwhisper.live.stream import LiveError, StreamingTranscriber, StreamOptions, StreamUpdate
from specwhisper.pipeline.options import LIVE_TAKES, live_refusal, options_for
from specwhisper.pipeline.writers import check_output_dir, write_outputs
from specwhisper.serving.arguments import option_values
from specwhisper.serving.cli.stdio import STDIN_NAME, STDIN_STEM, STDIO, StdinAudio, StreamFormatError


def run_live(args, formats: list[str], opts, pipeline_factory) -> int:
    """``pipeline_factory()`` loads the pipeline (its ASR engine is the live engine's model)."""
    if len(args.inputs) != 1 or Path(args.inputs[0]).is_dir():
        raise LiveError("--live plays one audio file")
    refused = live_refusal(option_values(args, options_for("cli", "run")))
    if refused is not None:
        raise LiveError(f"{refused.cli_flags[-1]} does not apply to --live: {LIVE_TAKES}")
    path = args.inputs[0]
    listening = path == STDIO
    out_dir = args.output_dir or Path(".")
    check_output_dir(out_dir)
    if not listening:
        check_length(path, args.max_duration)
    options = StreamOptions.of(opts.decode, args.word_timestamps, speculative=args.draft != "none")
    options.validate()
    audio = None if listening else load_audio(path, max_seconds=args.max_duration)
    engine = pipeline_factory().asr
    live = StreamingTranscriber(engine, options)

    def show(update: StreamUpdate) -> None:
        if update.confirmed.words and not args.quiet:
            print(update.confirmed.text, end="", flush=True)

    over = None
    if listening:
        played, over = _listen(live, args.max_duration, show)
    else:
        played = replay(live, audio, args.live_chunk, on_update=show)
    if not args.quiet:
        print()
    name = STDIN_NAME if listening else path
    transcript = live.transcript(played.compute, source=name)
    written = write_outputs(transcript, out_dir, STDIN_STEM if listening else Path(path).stem, formats, opts.subtitles)
    duration = transcript.duration
    if not args.quiet:
        lat = sorted(played.latencies)
        p50 = f"{lat[len(lat) // 2]:.2f} s" if lat else "n/a"
        print(f"transcribe: {name}: {duration:.1f} s {'heard' if listening else 'played'} live, median confirmation "
              f"latency {p50}, compute {played.compute / max(duration, 1e-9):.2f} s per audio second; "
              f"wrote {', '.join(p.name for p in written)}", file=sys.stderr)
    if over is not None:
        print(f"transcribe: error: {over} (the transcript of the audio up to it is written)", file=sys.stderr)
        return 1
    return 0


def _listen(live: StreamingTranscriber, max_seconds: float, show) -> tuple[Replay, str | None]:
    """Standard input through ``live`` as it arrives, up to ``max_seconds`` of it; the first Ctrl-C ends the
    stream there (the second interrupts as usual). The replay, and the error that ended the stream early (the
    limit passed, bytes that are not audio after some that were)."""
    source, limit = StdinAudio(), int(max_seconds * SAMPLE_RATE)
    heard, over = 0, []

    def take():
        nonlocal heard
        try:
            audio = source.take()
        except StreamFormatError as exc:
            if not heard:
                raise
            over.append(str(exc))  # bad bytes after good audio: what was heard is transcribed and written
            return None
        if audio is not None and heard + len(audio) > limit:
            audio = audio[: limit - heard]
            over.append(str(over_limit(STDIN_NAME, max_seconds)))
            source.stop()
        heard += 0 if audio is None else len(audio)
        return audio

    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None

    def interrupted(signum, frame):
        source.stop()
        signal.signal(signal.SIGINT, previous)

    if main:
        signal.signal(signal.SIGINT, interrupted)
    try:
        return listen(live, take, show), (over[0] if over else None)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
