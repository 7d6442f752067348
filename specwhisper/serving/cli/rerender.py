"""`transcribe talk.json -f srt --max-line-width 42`: a transcript's json (ours, openai-whisper's or WhisperX's)
written again in other formats, another subtitle layout or one segment per sentence, with no model run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specwhisper.batch.inputs import output_stems
from specwhisper.pipeline.options import options_for, run_options, subtitle_options
from specwhisper.pipeline.writers import check_output_dir, parse_formats
from specwhisper.results.transcript import Transcript
from specwhisper.messages import printable
from specwhisper.serving.arguments import option_values
from specwhisper.serving.cli.args import batch_flags_used
from specwhisper.serving.cli.stdio import check_stdout, write_transcript, writes_stdout

# what shapes the files written from a json; any other option would need the audio
RENDERING = {"formats", "segment_resolution"}


def is_json(path: str) -> bool:
    return Path(path).suffix.lower() == ".json"


def check_args(args) -> None:
    """A json is rendered, not transcribed: options that need the audio, or a mix of json and audio, are
    refused in one line (a ValueError)."""
    audio = [p for p in args.inputs if not is_json(p)]
    if audio:
        raise ValueError(f"{audio[0]}: json transcripts are rendered and audio transcribed: give one kind of input")
    if args.live:
        raise ValueError("--live transcribes what it hears; a json transcript is already written")
    if args.align_text is not None:
        raise ValueError("--align-text needs the audio: give the audio file, not its json")
    if used := batch_flags_used(args):
        raise ValueError(f"{used[0]} applies to a folder input")
    for option in options_for("cli"):
        if option.name in RENDERING or option.group == "subtitles" or option.scope == "output":
            continue
        if getattr(args, option.name) != option.default:
            flag = option.cli_flags[-1]
            raise ValueError(f"{flag} does not apply to a json transcript: it is rendered again, not transcribed "
                             "(the formats, the subtitle options and --segment-resolution apply)")


def read_transcript(path: Path) -> Transcript:
    """A json file as a transcript; a ValueError of one line naming it."""
    name = printable(str(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{name}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{name}: not a readable json file ({type(exc).__name__})") from None
    try:
        return Transcript.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def rerender(args, prog: str) -> int:
    """Each json input written again in the asked formats under ``-o`` (beside the others' outputs, never over
    the json itself: json is not among the formats written); 1 when any input failed."""
    check_args(args)
    values = option_values(args, options_for("cli"))
    layout = subtitle_options(values)
    layout.validate()
    opts = run_options({"segment_resolution": values["segment_resolution"]})
    asked = [f.strip().lower() for f in (args.formats or "all").split(",")]
    formats = [f for f in parse_formats(args.formats or "all") if f != "json"]
    if not formats:
        raise ValueError("-f json: the input is the json; choose other formats (srt, vtt, txt, tsv, aud, textgrid, rttm)")
    check_stdout(args, formats)
    out_dir = None if writes_stdout(args) else args.output_dir or Path(".")
    if out_dir is not None:
        check_output_dir(out_dir)
    inputs = list(dict.fromkeys(args.inputs))
    failures = 0
    for path, stem in zip(map(Path, inputs), output_stems([Path(p) for p in inputs])):
        try:
            transcript = read_transcript(path)
            if opts.segment_resolution == "sentence" and not any(s.words for s in transcript.segments):
                raise ValueError(f"{printable(str(path))}: --segment-resolution sentence cuts at words, and this json has none "
                                 "(transcribe with --word-timestamps)")
            transcript.segments = opts.resolved(transcript.segments)
            diarized = bool(transcript.speakers)
            if "rttm" in asked and not diarized:
                raise ValueError(f"{printable(str(path))}: -f rttm needs speakers, and this transcript has none")
            written = write_transcript(transcript, out_dir, stem, [f for f in formats if f != "rttm" or diarized], layout)
        except (ValueError, OSError) as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            failures += 1
            continue
        if not args.quiet:
            print(f"{prog}: {printable(str(path))}: wrote {', '.join(map(printable, written))} (rendered from the json, no model run)",
                  file=sys.stderr)
    return 1 if failures else 0
