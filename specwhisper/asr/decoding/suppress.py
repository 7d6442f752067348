"""Which tokens the decoder never writes: the model's own set (its generation config's ``suppress_tokens``,
openai-whisper's ``-1``), token ids given by the user (openai-whisper's and faster-whisper's
``suppress_tokens``), and every token holding a digit or a currency or percent sign (WhisperX's
``suppress_numerals``: numbers come out spelled, "twenty-five", as a speech dataset or a TTS corpus
wants them). The set goes into the logit rules (``decoding.rules``) that plain, speculative and beam
decoding all share, so a drafter's digits are rejected like any other token the target would not write.
"""

from __future__ import annotations

NUMERAL_SYMBOLS = "0123456789%$£"  # WhisperX's find_numeral_symbol_tokens


def parse_suppress_tokens(spec: str) -> tuple[bool, list[int]]:
    """``"-1,220"`` -> (the model's own set included, [220]); ``""``: nothing suppressed but what decoding
    itself needs. Raises ValueError naming the bad item."""
    ids = []
    for item in (p.strip() for p in spec.split(",")):
        if not item:
            continue
        try:
            ids.append(int(item))
        except ValueError:
            raise ValueError(f"token ids separated by commas (-1: the model's own set), got {item!r}") from None
        if ids[-1] < -1:
            raise ValueError(f"token ids are >= 0 (-1: the model's own set), got {ids[-1]}")
    return -1 in ids, sorted({i for i in ids if i >= 0})


def numeral_tokens(tokenizer, eot: int) -> list[int]:
    """The text tokens whose text holds a digit, ``%``, ``$`` or ``£`` (about 430 of Whisper's vocabulary;
    0.5 s to find)."""
    texts = tokenizer.batch_decode([[i] for i in range(eot)])
    return [i for i, text in enumerate(texts) if any(ch in NUMERAL_SYMBOLS for ch in text)]


def suppressed_tokens(spec: str, model_set: list[int], vocab_size: int, numerals: list[int] = ()) -> list[int]:
    """The ids ``spec`` (``parse_suppress_tokens``) names over a model whose own set is ``model_set``, with
    ``numerals`` (``numeral_tokens``, for ``suppress_numerals``); an id outside the vocabulary is refused."""
    with_model, ids = parse_suppress_tokens(spec)
    check_vocabulary(ids, vocab_size)
    return sorted(set(ids) | (set(model_set) if with_model else set()) | set(numerals))


def check_vocabulary(ids: list[int], vocab_size: int | None) -> None:
    """A one-line ValueError for the first id outside a vocabulary of ``vocab_size`` (None: not known)."""
    outside = [i for i in ids if vocab_size is not None and i >= vocab_size]
    if outside:
        raise ValueError(f"suppress-tokens: {outside[0]} is not a token of this model (its ids are 0 to {vocab_size - 1})")
