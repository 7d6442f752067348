"""``multichannel``: the transcripts of a recording's channels, each heard on its own, as one transcript
in which every channel is a speaker (``CHANNEL_1``, ``CHANNEL_2``, ...), segments in time order and
talk that overlaps another channel's marked as such, as diarized segments are.

A channel's segment is cut where another channel takes a turn (``REPLY_S`` of words) between two of its words: Whisper writes one
party's turns before and after the other's reply as one segment, its word before the reply stretched over
it (a call whose parties take turns, tiny.en: "in 1813, in being comparatively modern." over 0.0-9.4 s, the
other party's sentence at 1.8-7.0 s, "1813," dated 0.1-7.5 s), which put the reply after both turns; each
piece is then sorted into the conversation where it was said, the stretched word ending where the reply
starts.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter

from specwhisper.results.stats import DecodeStats
from specwhisper.results.transcript import Segment, Transcript
from specwhisper.results.words import split_at

STAGES = ("asr", "vad", "encoder", "decoder", "postedit")  # the timings summed over the channels
REPLY_S = 1.0  # another channel's words between two of a segment's words: a turn of its own, cut there


def channel_speaker(index: int) -> str:
    return f"CHANNEL_{index + 1}"


def merge_channels(transcripts: list[Transcript], source: str | None = None) -> Transcript:
    """One transcript of the channels' (``transcripts``, in channel order, each of the whole recording):
    each segment and word labelled with its channel, the segments sorted by time (a tie in channel
    order); ``overlap`` where another channel's segment overlaps it. The language is the one most of the
    speech was decoded in; the stages' seconds and the decoders' counters are the channels' sums."""
    spans = [[(w.start, w.end) for s in t.segments for w in s.words] for t in transcripts]
    channels: list[list[Segment]] = []
    for index, transcript in enumerate(transcripts):
        speaker = channel_speaker(index)
        others = sorted(x for j, xs in enumerate(spans) if j != index for x in xs)
        pieces = []
        for segment in transcript.segments:
            segment.speaker = speaker
            for word in segment.words:
                word.speaker = speaker
            pieces += split_at(segment, _turns_between(segment, others))
        channels.append(pieces)
    segments = sorted((s for pieces in channels for s in pieces), key=lambda s: (s.start, s.end))
    _mark_overlaps(channels)
    spoken = Counter()
    for transcript in transcripts:
        spoken[transcript.language] += sum(s.end - s.start for s in transcript.segments)
    language = max((lang for lang in spoken if lang), key=lambda lang: spoken[lang], default=transcripts[0].language)
    stats = DecodeStats()
    for transcript in transcripts:
        stats.merge(transcript.stats)
    duration = transcripts[0].duration
    timings = {k: round(sum(t.timings.get(k, 0.0) for t in transcripts), 3) for k in STAGES if any(k in t.timings for t in transcripts)}
    timings["total"] = round(sum(t.timings.get("total", 0.0) for t in transcripts), 3)
    timings["rtf"] = round(timings["total"] / duration, 3) if duration else 0.0
    model = {**transcripts[0].model, "multichannel": len(transcripts),
             "channel_languages": [t.language for t in transcripts]}
    return Transcript(segments, language, duration, model, timings, stats, source)


def _turns_between(segment: Segment, others: list[tuple[float, float]]) -> list[int]:
    """The indices of ``segment``'s words before which another channel takes a turn: ``REPLY_S`` or more of
    its whole words (``others``: their (start, end), sorted) after this segment's previous word starts. That
    previous word, stretched over the reply, then ends where the reply starts. Talk that overlaps word for
    word is not cut (a word's gap to the next holds no reply that long)."""
    words, cuts = segment.words, []
    for k in range(1, len(words)):
        i = bisect_right(others, (words[k - 1].start, float("inf")))
        inside = [(a, b) for a, b in others[i:_first_at(others, words[k].start)] if b <= words[k].start]
        if sum(b - a for a, b in inside) >= REPLY_S:
            cuts.append(k)
            words[k - 1].end = max(words[k - 1].start, min(words[k - 1].end, inside[0][0]))
    return cuts


def _first_at(spans: list[tuple[float, float]], t: float) -> int:
    """The index of the first span starting at ``t`` or later."""
    return bisect_right(spans, (t, float("-inf")))


def _mark_overlaps(channels: list[list[Segment]]) -> None:
    """``overlap`` on each segment that another channel's segment overlaps in time (each channel's segments
    are in time order and do not overlap one another)."""
    ends = [[s.end for s in segments] for segments in channels]
    for i, segments in enumerate(channels):
        for segment in segments:
            for j, others in enumerate(channels):
                if j == i:
                    continue
                k = bisect_right(ends[j], segment.start)  # the first of theirs ending after this one starts
                if k < len(others) and others[k].start < segment.end:
                    segment.overlap = True
                    break
