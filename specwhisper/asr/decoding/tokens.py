"""Whisper's special tokens and the decoder prompt, read from a tokenizer and a generation config."""

from __future__ import annotations

from dataclasses import dataclass

from transformers.models.whisper.tokenization_whisper import LANGUAGES


def _language_tokens(tokenizer) -> dict[str, int]:
    """``<|xx|>`` -> id for every Whisper language code the tokenizer has as a token."""
    ids = {f"<|{code}|>": tokenizer.convert_tokens_to_ids(f"<|{code}|>") for code in LANGUAGES}
    return {token: i for token, i in ids.items() if i is not None and i != tokenizer.unk_token_id}


@dataclass(frozen=True)
class SpecialTokens:
    eot: int
    sot: int
    sot_prev: int
    sot_lm: int
    no_speech: int | None
    no_timestamps: int
    transcribe: int
    translate: int
    timestamp_begin: int
    languages: dict[str, int]  # "en" -> token id
    multilingual: bool
    vocab_size: int | None = None  # the model's (None: not known)

    @classmethod
    def from_tokenizer(cls, tokenizer, generation_config, vocab_size: int | None = None) -> SpecialTokens:
        """``generation_config``'s ``lang_to_id`` and ``is_multilingual`` where it has them. A checkpoint
        without them (a bare ``save_pretrained`` of a fine-tune, say) gets its languages from the
        tokenizer's ``<|xx|>`` tokens and is multilingual when its vocabulary is (openai's rule: at
        least 51865 tokens, ``vocab_size`` of the model; English-only models have 51864)."""
        ids = tokenizer.convert_tokens_to_ids
        no_speech = next((ids(t) for t in ("<|nospeech|>", "<|nocaptions|>") if ids(t) != tokenizer.unk_token_id), None)
        lang_to_id = getattr(generation_config, "lang_to_id", None) or _language_tokens(tokenizer)
        multilingual = getattr(generation_config, "is_multilingual", None)
        if multilingual is None:
            multilingual = vocab_size >= 51865 if vocab_size is not None else len(lang_to_id) > 1
        languages = {k.strip("<|>"): int(v) for k, v in lang_to_id.items()} if multilingual else {}
        no_ts = ids("<|notimestamps|>")
        return cls(
            eot=ids("<|endoftext|>"),
            sot=ids("<|startoftranscript|>"),
            sot_prev=ids("<|startofprev|>"),
            sot_lm=ids("<|startoflm|>"),
            no_speech=no_speech,
            no_timestamps=no_ts,
            transcribe=ids("<|transcribe|>"),
            translate=ids("<|translate|>"),
            timestamp_begin=no_ts + 1,
            languages=languages,
            multilingual=multilingual,
            vocab_size=vocab_size,
        )

    # openai/whisper keeps this many tokens of previous text: half the text context (448), less one
    MAX_CONTEXT = 223

    def lead(self, prompt: list[int]) -> list[int]:
        """The tokens of ``prompt`` after its SOT sequence (<|startoftranscript|>, the language, the task,
        <|notimestamps|>): a prefix every decoded row starts with (faster-whisper's ``prefix``, the
        tokens a decode is forced to begin with); none for a prompt that ends with its SOT sequence."""
        if self.sot not in prompt:
            return []
        i = prompt.index(self.sot) + 1
        while i < len(prompt) and self.eot <= prompt[i] < self.timestamp_begin:
            i += 1
        return prompt[i:]

    def prompt(self, language: str | None, task: str, timestamps: bool, context: list[int] | None = None) -> list[int]:
        """The decoder prompt; ``context`` (previous text, an initial prompt) goes after <|startofprev|>,
        its last ``MAX_CONTEXT`` tokens."""
        seq = [self.sot_prev, *context[-self.MAX_CONTEXT :], self.sot] if context else [self.sot]
        if self.multilingual:
            if language is not None:
                seq.append(self.languages[language])
            seq.append(self.translate if task == "translate" else self.transcribe)
        if not timestamps:
            seq.append(self.no_timestamps)
        return seq
