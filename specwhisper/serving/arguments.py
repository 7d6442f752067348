"""Command-line arguments shared by the front ends (``transcribe``, the HTTP server, the web UI): a
parser whose errors are one line, and the argument types they share."""

from __future__ import annotations

import argparse

from specwhisper.pipeline.option import Option, OptionError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line ('transcribe: error: ...'), not usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def tcp_port(any_free: bool = True):
    """argparse type: a TCP port to listen on, 1 to 65535, or 0 (the system picks a free one) when
    ``any_free`` (uvicorn takes 0; Gradio does not)."""
    lowest = 0 if any_free else 1
    what = f"a port number, {lowest} to 65535{' (0: any free port)' if any_free else ''}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if not lowest <= value <= 65535:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'")
        return value

    return parse


def positive(kind, or_zero: bool = False):
    """argparse type: a number of ``kind`` above zero (``or_zero``: or zero; never NaN)."""
    what = f"a {'non-negative' if or_zero else 'positive'} {kind.__name__}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if not (value >= 0 if or_zero else value > 0):  # NaN fails both
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'")
        return value

    return parse


def _typed(option: Option):
    """argparse type: the option's own conversion and check (its one-line message)."""

    def parse(text: str):
        try:
            return option.check(text)
        except OptionError as exc:
            raise argparse.ArgumentTypeError(exc.problem) from None

    parse.__name__ = option.kind.__name__  # argparse names the type in some messages
    return parse


def add_options(parser: argparse.ArgumentParser, options: list[Option]) -> None:
    """One argument per option, under a heading per group; the underscore spelling (openai-whisper's and
    WhisperX's: ``--beam_size 5``, ``--word_timestamps True``) and the peers' own names are accepted
    too, hidden from --help."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for option in options:
        group = groups.get(option.group) or groups.setdefault(option.group, parser.add_argument_group(option.group))
        if option.kind is bool:
            group.add_argument(*option.cli_flags, dest=option.name, default=option.default, help=option.describe(),
                               action=argparse.BooleanOptionalAction)
        else:
            group.add_argument(*option.cli_flags, dest=option.name, default=option.default, type=_typed(option),
                               help=option.describe(), metavar=option.name.upper() if not option.choices else None,
                               choices=None)
        taken = set(parser._option_string_actions)
        hidden = ["--" + option.name] if "_" in option.name else []
        for flag in [*hidden, *option.peer_flags]:
            if flag not in taken:  # a peer's switch alone (WhisperX's --speaker_embeddings) is true
                extra = {"nargs": "?", "const": True} if option.kind is bool else {}
                parser.add_argument(flag, dest=option.name, type=_typed(option), help=argparse.SUPPRESS,
                                    default=argparse.SUPPRESS, **extra)


def option_values(args: argparse.Namespace, options: list[Option]) -> dict:
    """The parsed values of ``options``, by name."""
    return {o.name: getattr(args, o.name) for o in options}
