"""Text invented over music between speech, with and without ``hallucination_silence_threshold``:
ours against openai-whisper's own ``transcribe()`` (the openai-whisper package, on the same base
weights converted to its layout), on audio of specwhisper.evaluation.music_gap.

    python bench/hallucination.py [--threshold 2] [--draws 4] [--threads 2]

Per case, system and setting (the threshold off, then on; word timestamps on in both, as openai
requires for the option), over ``--draws`` seeds of the temperature fallback's sampling (ours: the
sampler's seed; openai-whisper: torch's): ``invented_words`` (words whose start falls over the
tones, summed over the draws), ``clean_draws`` (draws with none there), ``wer`` against the two
clips' references (mean over the draws), ``max_deleted`` (the largest share of the references'
words missing from one draw's text), wall seconds and ``rtf`` (means), and draw 0's text. What
Whisper writes over music depends on the draws when its greedy text fails openai's checks: one draw
says little. English given, greedy with openai's temperature fallback, in one process, the
systems in turn per case and draw.

Writes bench/results/hallucination.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402

# (first clip, seconds of tones, second clip, seed of the melody)
CASES = [
    ("cuttledoc-fleurs/fleurs-en-003.ogg", 20.0, "cuttledoc-fleurs/fleurs-en-004.ogg", 0),
    ("openai-whisper/jfk.flac", 30.0, "coqui-tts-ljspeech/LJ001-0001.wav", 0),
    ("cuttledoc-fleurs/fleurs-en-002.ogg", 20.0, "cuttledoc-fleurs/fleurs-en-004.ogg", 1),
    ("cuttledoc-fleurs/fleurs-en-003.ogg", 25.0, "cuttledoc-fleurs/fleurs-en-004.ogg", 0),
]
# Hugging Face Whisper names -> openai-whisper's (the reverse of transformers' conversion script)
RENAMES = [
    (r"^model\.", ""), (r"\.layers\.", ".blocks."), (r"self_attn_layer_norm", "attn_ln"),
    (r"encoder_attn_layer_norm", "cross_attn_ln"), (r"self_attn\.", "attn."), (r"encoder_attn\.", "cross_attn."),
    (r"q_proj", "query"), (r"k_proj", "key"), (r"v_proj", "value"), (r"out_proj", "out"), (r"fc1", "mlp.0"),
    (r"fc2", "mlp.2"), (r"final_layer_norm", "mlp_ln"), (r"^encoder\.layer_norm", "encoder.ln_post"),
    (r"^decoder\.layer_norm", "decoder.ln"), (r"^encoder\.embed_positions\.weight", "encoder.positional_embedding"),
    (r"^decoder\.embed_positions\.weight", "decoder.positional_embedding"), (r"embed_tokens", "token_embedding"),
]


def openai_model(bundle):
    """openai-whisper's ``Whisper`` with the weights and alignment heads of our loaded ``bundle``."""
    import torch
    from whisper.model import ModelDimensions, Whisper

    c = bundle.model.config
    dims = ModelDimensions(n_mels=c.num_mel_bins, n_audio_ctx=c.max_source_positions, n_audio_state=c.d_model,
                           n_audio_head=c.encoder_attention_heads, n_audio_layer=c.encoder_layers, n_vocab=c.vocab_size,
                           n_text_ctx=c.max_target_positions, n_text_state=c.d_model,
                           n_text_head=c.decoder_attention_heads, n_text_layer=c.decoder_layers)
    state = {}
    for name, tensor in bundle.model.state_dict().items():
        for a, b in RENAMES:
            name = re.sub(a, b, name)
        state[name] = tensor
    model = Whisper(dims)
    model.load_state_dict({k: v for k, v in state.items() if k in model.state_dict()}, strict=True)
    heads = torch.zeros(dims.n_text_layer, dims.n_text_head, dtype=torch.bool)
    for layer, head in bundle.generation_config.alignment_heads:
        heads[layer, head] = True
    model.register_buffer("alignment_heads", heads.to_sparse(), persistent=False)
    return model.eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threshold", type=float, default=2.0)
    ap.add_argument("--draws", type=int, default=4, help="seeds of the fallback's sampling per case and setting")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "hallucination.json")
    args = ap.parse_args()

    from functools import partialmethod

    import torch
    import whisper

    from specwhisper.asr.decoding.greedy import SamplingDecoder
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.evaluation.music_gap import music_gap
    from specwhisper.evaluation.transcripts import deleted_share, load_manifest, wer
    from specwhisper.pipeline.core import Pipeline
    from specwhisper.pipeline.config import PipelineConfig, RunOptions

    torch.set_num_threads(args.threads)
    ours = Pipeline(PipelineConfig(model="base", draft="none", device="cpu", threads=args.threads))
    theirs = openai_model(ours.asr.bundle)
    items = {i.file: i for i in load_manifest()}
    sampler_init = SamplingDecoder.__init__
    runs = []
    for first, seconds, second, seed in CASES:
        built = music_gap(items[first], seconds, items[second], seed=seed)
        duration = len(built.audio) / 16000
        case = f"{Path(first).stem} + {seconds:.0f} s tones (seed {seed}) + {Path(second).stem}"
        for threshold in (None, args.threshold):
            draws = {"ours": [], "openai-whisper": []}
            for draw in range(args.draws):
                SamplingDecoder.__init__ = partialmethod(sampler_init, seed=draw)  # the engine seeds its samplers with 0
                t = time.perf_counter()
                r = ours.run(built.audio, RunOptions(decode=DecodeOptions(
                    language="en", word_timestamps=True, hallucination_silence_threshold=threshold)))
                draws["ours"].append((time.perf_counter() - t, r.text, [w.start for s in r.segments for w in s.words]))
                torch.manual_seed(draw)
                t = time.perf_counter()
                o = whisper.transcribe(theirs, built.audio, language="en", fp16=False, word_timestamps=True,
                                       hallucination_silence_threshold=threshold, verbose=None)
                draws["openai-whisper"].append((time.perf_counter() - t, o["text"],
                                                [w["start"] for s in o["segments"] for w in s.get("words", [])]))
            for system, got in draws.items():
                invented = [built.inside(starts) for _, _, starts in got]
                wall = sum(w for w, _, _ in got) / len(got)
                run = dict(name=f"{case}: {system}, threshold {threshold}", case=case, system=system,
                           hallucination_silence_threshold=threshold, draws=len(got), invented_words=sum(invented),
                           clean_draws=sum(n == 0 for n in invented),
                           wer=round(sum(wer([built.reference], [text]) for _, text, _ in got) / len(got), 4),
                           max_deleted=round(max(deleted_share(built.reference, text) for _, text, _ in got), 4),
                           wall_s=round(wall, 2), rtf=round(wall / duration, 4), text=got[0][1].strip())
                runs.append(run)
                print(f"{run['name']}: invented {run['invented_words']} ({run['clean_draws']}/{len(got)} clean), "
                      f"wer {run['wer']}, max deleted {run['max_deleted']}, {wall:.1f} s | {run['text']}", flush=True)
    SamplingDecoder.__init__ = sampler_init
    args.out.write_text(json.dumps({"machine": machine(args.threads), "runs": runs}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
