"""``transcribe --live FILE``: play a file through the live engine in real time, printing confirmed
text as it comes, and write the usual formats at the end (specwhisper.live.stream)."""

from __future__ import annotations

import sys
from pathlib import Path

from specwhisper.audio.loading import check_length, load_audio
from specwhisper.live.replay import replay
from specwhisper.live.stream import LiveError, StreamingTranscriber, StreamOptions, StreamUpdate
from specwhisper.pipeline.options import LIVE_TAKES, live_refusal, options_for
from specwhisper.pipeline.writers import check_output_dir, write_outputs
from specwhisper.serving.arguments import option_values


def run_live(args, formats: list[str], opts, pipeline_factory) -> int:
    """``pipeline_factory()`` loads the pipeline (its ASR engine is the live engine's model)."""
    if len(args.inputs) != 1 or Path(args.inputs[0]).is_dir():
        raise LiveError("--live plays one audio file")
    refused = live_refusal(option_values(args, options_for("cli", "run")))
    if refused is not None:
        raise LiveError(f"{refused.cli_flags[-1]} does not apply to --live: {LIVE_TAKES}")
    path = args.inputs[0]
    out_dir = args.output_dir or Path(".")
    check_output_dir(out_dir)
    check_length(path, args.max_duration)
    options = StreamOptions.of(opts.decode, speculative=args.draft != "none")
    options.validate()
    audio = load_audio(path, max_seconds=args.max_duration)
    engine = pipeline_factory().asr
    live = StreamingTranscriber(engine, options)

    def show(update: StreamUpdate) -> None:
        if update.confirmed.words and not args.quiet:
            print(update.confirmed.text, end="", flush=True)

    played = replay(live, audio, args.live_chunk, on_update=show)
    if not args.quiet:
        print()
    duration = len(audio) / 16000
    transcript = live.transcript(played.compute, source=str(path))
    stem = Path(path).stem
    written = write_outputs(transcript, out_dir, stem, formats, opts.subtitles)
    if not args.quiet:
        lat = sorted(played.latencies)
        p50 = f"{lat[len(lat) // 2]:.2f} s" if lat else "n/a"
        print(f"transcribe: {path}: {duration:.1f} s played live, median confirmation latency {p50}, "
              f"compute {played.compute / max(duration, 1e-9):.2f} s per audio second; "
              f"wrote {', '.join(p.name for p in written)}", file=sys.stderr)
    return 0
