"""What every layer says to users about a failure: one line, bounded in length (the text may come from
a hostile request or a library's multi-line message). Light on purpose: the CLI reports bad arguments
with it before torch is imported."""

from __future__ import annotations

import reprlib

MAX_MESSAGE = 300  # characters of user-sent text an error message repeats


def short_repr(value: object) -> str:
    """A bounded repr (depth, lengths) of a value a request sent."""
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlist, r.maxdict = 3, 60, 60, 6, 6
    return r.repr(value)


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line and at most ``limit`` characters (it may come from a hostile request)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(name: str) -> str:
    """A file name as a message shows it: its control characters (a newline, a tab) escaped, so that the
    message stays one line and says the whole name; any other character as it is."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type when it has none), at most ``MAX_MESSAGE``
    characters; its spaces as they are (a file name in it stays the file's name)."""
    lines = str(exc).strip().splitlines()
    first = lines[0].strip() if lines else type(exc).__name__
    return first if len(first) <= MAX_MESSAGE else first[: MAX_MESSAGE - 3] + "..."
