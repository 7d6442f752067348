"""docs/cli.md, generated from the `transcribe` parser and the options table:
``python -m specwhisper.serving.cli.reference > docs/cli.md`` (tests/test_docs.py checks it is current)."""

from __future__ import annotations

import argparse
import sys

from specwhisper.pipeline.option import ENTRY_POINTS
from specwhisper.pipeline.options import OPTIONS, REFUSED
from specwhisper.serving.cli.args import PEER_MEANINGS, build_parser

HEADER = """# `transcribe` command line

Generated from the parser (`python -m specwhisper.serving.cli.reference > docs/cli.md`); every
transcription option is declared once in
[`specwhisper/pipeline/options.py`](../specwhisper/pipeline/options.py), and the same names work in the
Python API (`transcriber.transcribe(audio, beam_size=5)`), the HTTP server's parameters (`?beam_size=5`,
[serving.md](serving.md)) and the web UI's "More options".

```
transcribe INPUT... [options]
```

INPUT is one or more audio or video files, or one folder (a resumable batch: [batch.md](batch.md)),
or `-`: the audio on standard input, and `-o -` writes the one format `-f` names to standard output
(`ffmpeg -i talk.mkv -f wav - | transcribe - -f srt -o - > talk.srt`); with `--live`, `-` is heard as it
arrives ([live.md](live.md)). What is written: [outputs.md](outputs.md); `--live`: [live.md](live.md); bad input gives one
`transcribe: error: ...` line per file and a non-zero exit ([transcription.md](transcription.md#inputs-and-errors)).
"""


def _flags(action: argparse.Action) -> str:
    return ", ".join(f"`{f}`" for f in action.option_strings)


def render() -> str:
    parser = build_parser()
    out = [HEADER]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS and a.option_strings]
        if not actions:
            continue
        title = "General" if group.title in ("options", "optional arguments") else group.title.capitalize()
        out.append(f"## {title}\n")
        if group.description:
            out.append(group.description + "\n")
        out.append("| option | what it does |\n|---|---|")
        for a in actions:
            out.append(f"| {_flags(a)} | {' '.join((a.help or '').split()).replace('|', '/')} |")
        out.append("")
    out.append("## Where each option is taken\n")
    out.append("| option | " + " | ".join(ENTRY_POINTS) + " |\n|---|" + "---|" * len(ENTRY_POINTS))
    for o in OPTIONS:
        cells = ["yes" if e in o.entry_points else f"no: {o.not_in[e]}" for e in ENTRY_POINTS]
        out.append(f"| `{o.name}` | " + " | ".join(cells) + " |")
    out.append("")
    out.append("## The peers' spellings\n")
    out.append("openai-whisper's and WhisperX's underscore spellings of the options above are accepted as they are "
               "(`--beam_size 5`, `--word_timestamps True`, `--temperature_increment_on_fallback None`), and so are:\n")
    out.append("| their option | here |\n|---|---|")
    for o in OPTIONS:
        for flag in o.peer_flags:
            out.append(f"| `{flag}` | `{o.cli_flags[-1]}` |")
    for flag, _, _, meaning in PEER_MEANINGS:
        out.append(f"| `{flag}` | {meaning} |")
    out.append("\nTheir options with no meaning here are refused by name, with the reason:\n")
    out.append("| their option | why |\n|---|---|")
    for flag, why in REFUSED.items():
        out.append(f"| `{flag}` | {why} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
