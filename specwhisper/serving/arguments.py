"""Command-line arguments shared by the front ends (``transcribe``, the HTTP server, the web UI): a
parser whose errors are one line, and the argument types they share."""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line ('transcribe: error: ...'), not usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def positive(kind):
    """argparse type: a number of ``kind`` above zero."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got '{text}'") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got '{text}'")
        return value

    return parse
