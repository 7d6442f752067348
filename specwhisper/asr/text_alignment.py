"""Times for a text the user already has (forced alignment): the transcript's words are the text's, word
for word, and Whisper dates them.

The audio is transcribed first, as usual (no word timestamps needed). Its words, matched to the
text's (Levenshtein opcodes on normalised words, rapidfuzz's), say which of the pass's windows (up to 30 s,
cut in pauses) each word of the text was spoken in. Each window's share of the text then runs through the
decoder teacher-forced, and the cross-attention alignment that dates Whisper's own words
(``specwhisper.asr.decoding.alignment.WordAligner``) dates the text's. A word the transcript misheard,
missed or invented changes nothing but which window a word of the text falls in; every word of the text
gets a time, with its probability under the model (low where the audio does not say it).

Segments are the text's sentences and lines (in a text without sentence ends, the transcript's segments);
a sentence that crosses windows is one segment while it lasts at most a window's length. A subtitle file
(SRT or WebVTT) gives its cues' text, each cue one segment whatever sentences it holds: its cues come
back timed to the audio (subtitles brought in sync).
"""

from __future__ import annotations

import bisect
import logging
import re
import unicodedata
from dataclasses import dataclass, replace

import numpy as np

from specwhisper.asr.decoding.alignment import NO_SPACE_LANGUAGES, WordTokens, split_words
from specwhisper.audio.chunking import Chunk
from specwhisper.results.words import SENTENCE_END, spread_words, word_key
from specwhisper.results.transcript import Segment, Word

log = logging.getLogger(__name__)

ROUGH_MATCH = 0.3  # below this share of the text's words heard the same, the text may not be this audio's
# more words than this a second of audio (and a few over) cannot be the audio's: the fastest speech measured
# (rap, auctioneers) is 7-11 syllables a second; a text far too long would only cost minutes of placing
MAX_WORDS_PER_SECOND = 20


@dataclass
class TextWord:
    text: str  # as written, punctuation included
    key: str  # for matching: lower case, letters and digits alone ('' for punctuation alone)
    sentence: int  # the sentence or line it belongs to


@dataclass
class TextAlignment:
    segments: list[Segment]
    words: int  # words of the text
    matched: int  # of them, heard the same by the transcription pass

    def summary(self) -> dict:
        return {"text_words": self.words, "matched_words": self.matched,
                "matched_share": round(self.matched / self.words, 3) if self.words else 0.0}


def match_key(text: str) -> str:
    """A word's comparison form (``word_key``) after NFKC: full-width letters and digits match their own."""
    return word_key(unicodedata.normalize("NFKC", text))


# a cue's timing line: SRT's 00:00:01,000 --> 00:00:04,000, WebVTT's (hours optional) 00:01.000 --> 00:04.000 ...
CUE_TIMES = re.compile(r"^\s*(\d+:)?\d{1,2}:\d{2}[.,]\d{3}\s*-->\s*(\d+:)?\d{1,2}:\d{2}[.,]\d{3}")
# markup inside a cue: <i>, </b>, <c.yellow>, <v Bob>, WebVTT's <00:00:01.000>, ASS-style {\an8}
CUE_MARKUP = re.compile(r"<[^>]*>|\{\\[^}]*\}")


def subtitle_cues(text: str) -> list[str] | None:
    """The cues of an SRT or WebVTT file, each its text lines joined and its markup dropped; None when
    ``text`` has no cue timing line (a plain text). Cue numbers, identifiers, NOTE and STYLE blocks are
    not cue text: a cue's text is the lines after its timing line, up to a blank line."""
    lines = text.splitlines()
    if not any(CUE_TIMES.match(line) for line in lines):
        return None
    cues: list[str] = []
    current: list[str] | None = None
    for line in [*lines, ""]:
        if CUE_TIMES.match(line):
            current = []
        elif not line.strip():
            if current:
                cues.append(" ".join(current))
            current = None
        elif current is not None and (piece := " ".join(CUE_MARKUP.sub("", line).split())):
            current.append(piece)
    return cues


def text_words(text: str, language: str | None, sentences: bool = True) -> list[TextWord]:
    """The text's words (characters in languages written without spaces), each with its sentence: a
    sentence ends at the end of a line and, with ``sentences``, at . ! ? (and their full-width forms)."""
    no_space = language in NO_SPACE_LANGUAGES
    words: list[TextWord] = []
    sentence = 0
    for line in text.splitlines():
        pieces = [ch for ch in line if not ch.isspace()] if no_space else line.split()
        for piece in pieces:
            key = match_key(piece)
            if no_space and not key and words and words[-1].sentence == sentence:
                words[-1].text += piece  # 。 and ， belong to the character before them
            else:
                words.append(TextWord(piece, key, sentence))
            if sentences and piece[-1] in SENTENCE_END:
                sentence += 1
        if pieces and (not words or words[-1].sentence == sentence):
            sentence += 1
    return words


@dataclass
class HeardWord:
    key: str
    time: float  # its middle, in seconds
    segment: int  # the transcription pass's segment it is in


def heard_words(segments: list[Segment], language: str | None) -> list[HeardWord]:
    """The transcription pass's words (characters where the text is split into characters), each at the
    middle of its time: a word's own with word timestamps, else its share of its segment's."""
    out = []
    for n, seg in enumerate(segments):
        timed = [(w.start, w.end, w.text) for w in seg.words] or spread_words(seg)
        for start, end, text in timed:
            mid = (start + end) / 2
            key = match_key(text)
            if language in NO_SPACE_LANGUAGES:
                out += [HeardWord(ch, mid, n) for ch in key]
            elif key:
                out.append(HeardWord(key, mid, n))
    return out


def anchor_words(words: list[TextWord], heard: list[HeardWord]) -> tuple[list[int], int]:
    """For every word of the text, the heard word it matches or stands in for (an index of ``heard``;
    -1 when nothing was heard), and how many words matched. A stretch of the text the transcript lacks
    is split in half between the heard word before it and the one after; punctuation alone goes with
    the word before it."""
    from rapidfuzz.distance import Levenshtein

    keyed = [i for i, w in enumerate(words) if w.key]
    anchors = [-1] * len(words)
    matched = 0
    if heard and keyed:
        for op in Levenshtein.opcodes([h.key for h in heard], [words[i].key for i in keyed]):
            n_ref, n_heard = op.dest_end - op.dest_start, op.src_end - op.src_start
            for k in range(n_ref):
                if n_heard:
                    at = op.src_start + k * n_heard // n_ref
                else:
                    at = max(op.src_start - 1, 0) if k < n_ref / 2 else min(op.src_start, len(heard) - 1)
                anchors[keyed[op.dest_start + k]] = at
            if op.tag == "equal":
                matched += n_ref
    last = next((a for a in anchors if a >= 0), -1)
    for i, a in enumerate(anchors):
        last = anchors[i] = last if a < 0 else a
    return anchors, matched


def follow_heard_segments(words: list[TextWord], anchors: list[int], heard: list[HeardWord]) -> None:
    """A text without sentence ends (lower case, unpunctuated) is cut where the transcript's segments
    are: each line's words take new sentences where their heard words' segment changes."""
    sentence, key = 0, None
    for w, a in zip(words, anchors):
        k = (w.sentence, heard[a].segment if a >= 0 else 0)
        if key is not None and k != key:
            sentence += 1
        key, w.sentence = k, sentence


def windows_of(chunks: list[Chunk]) -> list[Chunk]:
    """The pass's planned windows (not its re-decoded stretches), in file order."""
    return sorted((c for c in chunks if c.depth == 0 and not c.joined), key=lambda c: c.start)


def align_text(engine, audio: np.ndarray, text: str, segments: list[Segment], chunks: list[Chunk],
               language: str | None, batch_size: int = 8) -> TextAlignment:
    """The segments of ``text`` with word times in ``audio``; ``segments`` and ``chunks`` are the
    transcription pass's (``AsrResult``), ``engine`` its ``AsrEngine``."""
    cues = subtitle_cues(text)
    words = text_words(text if cues is None else "\n".join(cues), language, sentences=cues is None)
    if not words:
        raise ValueError("the text to align has no words" + (" (its subtitle cues are empty)" if cues is not None else ""))
    seconds = len(audio) / 16000
    if len(words) > MAX_WORDS_PER_SECOND * seconds + MAX_WORDS_PER_SECOND:
        raise ValueError(f"the text to align has {len(words)} words for {seconds:.1f} s of audio (more than "
                         f"{MAX_WORDS_PER_SECOND} a second): is it this audio's text?")
    windows = windows_of(chunks)
    if not windows:
        raise ValueError("the audio is too short to align a text to")
    heard = heard_words(segments, language)
    anchors, matched = anchor_words(words, heard)
    if cues is None and not any(w.text[-1] in SENTENCE_END for w in words):
        follow_heard_segments(words, anchors, heard)
    times = [heard[a].time if a >= 0 else 0.0 for a in anchors]
    if matched < ROUGH_MATCH * len(words):
        log.warning(f"the transcript of the audio has only {matched} of the text's {len(words)} words: "
                    "is the text this audio's? Its words are placed where the audio is closest to it")
    starts = [w.start for w in windows]
    per_window: dict[int, list[int]] = {}
    for i, t in enumerate(times):
        per_window.setdefault(max(0, bisect.bisect_right(starts, round(t * 16000)) - 1), []).append(i)
    # each word's tokens, once: as Whisper writes a word after a space (in languages written without spaces, a
    # sentence's characters are tokenised together, and the tokenizer's split gives the words)
    own = None if language in NO_SPACE_LANGUAGES else [
        WordTokens(" " + w.text, engine.bundle.tokenizer.encode(" " + w.text, add_special_tokens=False)) for w in words]
    pieces: list[_Piece] = []
    for k, idx in sorted(per_window.items()):
        pieces += _fit(engine, windows[k], words, own, idx, language)
    grouped = {id(seg): split for p in pieces for seg, split in zip(p.segments, p.words)}
    for start in range(0, len(pieces), batch_size):
        batch = pieces[start : start + batch_size]
        pad = [p.window.start == 0 and p.window.end == len(audio) for p in batch]
        _, enc, _ = engine.encode([p.window.samples(audio) for p in batch], pad)
        engine.aligner.align(enc, [p.segments for p in batch], [p.window.start_s for p in batch],
                             [p.window.duration_s for p in batch], language, "transcribe",
                             words_of=lambda seg: grouped[id(seg)])
        for p in batch:
            for seg, split in zip(p.segments, p.words):
                _complete(seg, split)
    joined = _join_sentences([(s, n) for p in pieces for s, n in zip(p.segments, p.sentences)],
                             max_s=max(c.duration_s for c in windows))
    return TextAlignment(joined, len(words), matched)


@dataclass
class _Piece:
    """A window (or a part of one) and the text's words in it: a segment per sentence, each segment's
    sentence and its tokens grouped into the text's words."""

    window: Chunk
    segments: list[Segment]
    sentences: list[int]
    words: list[list[WordTokens]]


def _fit(engine, window: Chunk, words: list[TextWord], own: list[WordTokens] | None, idx: list[int],
         language: str | None) -> list[_Piece]:
    """A window's words as segments of tokens, one per sentence; a window given more tokens than the decoder
    takes is halved, its words split in half, until each half's fit. ``own``: each word's tokens (None in
    languages written without spaces)."""
    piece = _piece(engine, window, words, own, idx, language)
    limit = engine.runtime.max_len - len(engine.aligner.sot_sequence(language, "transcribe")) - 1
    fits = sum(len(s.tokens) for s in piece.segments) <= limit
    if fits or len(idx) < 2 or window.end - window.start < 2 * 16000:
        if not fits:
            log.warning(f"{len(idx)} words of the text at {window.start_s:.1f} s are more than the audio there can "
                        "hold: the last ones are put at the end of the others, undated")
        return [piece]
    mid = (window.start + window.end) // 2
    half = len(idx) // 2
    return (_fit(engine, Chunk(window.start, mid), words, own, idx[:half], language)
            + _fit(engine, Chunk(mid, window.end), words, own, idx[half:], language))


def _piece(engine, window: Chunk, words: list[TextWord], own: list[WordTokens] | None, idx: list[int],
           language: str | None) -> _Piece:
    """The window's words as one segment per sentence, tokenised as Whisper writes them (a space before
    each word, none in languages written without spaces)."""
    groups: list[list[int]] = []
    for i in idx:
        if groups and words[groups[-1][-1]].sentence == words[i].sentence:
            groups[-1].append(i)
        else:
            groups.append([i])
    segments, split = [], []
    for group in groups:
        if own is None:  # the tokenizer's split: a word is not what the text has between spaces
            text = "".join(words[i].text for i in group)
            tokens = engine.bundle.tokenizer.encode(text, add_special_tokens=False)
            split.append(split_words(tokens, engine.bundle.tokenizer, language))
        else:  # the text's words (Whisper's own split would cut "you;" in two)
            split.append([own[i] for i in group])
            text, tokens = "".join(w.text for w in split[-1]), [t for w in split[-1] for t in w.tokens]
        segments.append(Segment(start=window.start_s, end=window.start_s + window.duration_s, text=text, tokens=tokens,
                                seek=window.start // 160, language=language))
    return _Piece(window, segments, [words[g[0]].sentence for g in groups], split)


def _complete(seg: Segment, words: list[WordTokens]) -> None:
    """Words past what one window's decoder takes (a text far longer than its audio) at the last dated
    word's end, with no probability: every word of the text is in the transcript."""
    end = seg.words[-1].end if seg.words else seg.start
    seg.words += [Word(start=end, end=end, text=w.text, probability=None) for w in words[len(seg.words):]]


def _join_sentences(pieces: list[tuple[Segment, int]], max_s: float) -> list[Segment]:
    """The aligned pieces as the text's segments: the pieces of one sentence in consecutive windows
    joined while the segment lasts at most ``max_s``; each segment from its first word's start to its
    last word's end, its ``avg_logprob`` the mean log-probability of its words."""
    out: list[tuple[Segment, int]] = []
    for seg, sentence in pieces:
        if not seg.words:
            continue
        seg = replace(seg, start=seg.words[0].start, end=seg.words[-1].end)
        if out and out[-1][1] == sentence and seg.end - out[-1][0].start <= max_s:
            prev = out[-1][0]
            seg = replace(prev, end=seg.end, text=prev.text + seg.text, tokens=prev.tokens + seg.tokens,
                          words=prev.words + seg.words)
            out[-1] = (seg, sentence)
        else:
            out.append((seg, sentence))
    segments = [seg for seg, _ in out]
    for seg in segments:
        probs = [w.probability for w in seg.words if w.probability is not None]
        seg.avg_logprob = float(np.mean(np.log(np.maximum(probs, 1e-10)))) if probs else 0.0
    return segments
