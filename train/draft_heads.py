"""Train the multi-token draft heads (asr/draft_heads.py) by self-distillation from the target.

    python -m train.draft_heads [--model base] [--heads 4] [--steps 600]

Uses the states ``train.exit_adapter`` collects (espeak-ng speech and the public eval clips outside the
benchmark's English set, decoded by the target itself; cached in build/exit-adapter/): at every
decoded position the target's last-layer residual state r, its greedy next token g (the pending
token when drafting) and the tokens after it. Head j learns the j-th token after g: cross-entropy
to the target's greedy token plus KL to the target's own distribution at that position (its top 32),
over the labels, the teacher's top tokens and random negatives of the compact vocabulary. The target
stays frozen. Held out: 10% of the synthetic windows (to choose the confidence threshold) and the
23 clips of the public English WER set (never trained on), on which the speculative loop is replayed
to report acceptance and tokens per verify pass.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from train.exit_adapter import ROOT, SEED, Data, collect, log

# Costs relative to one plain step of base at batch 1 on this CPU (measured: a step 11.2 ms; a verify
# pass of m tokens 12.3 ms at m = 3-4, 14.4 at 5, 15.5 at 8; the heads, compact head and rules of a
# round about 1 ms)
VERIFY_PER_EXTRA_TOKEN = 0.055
DRAFT_ROUND = 0.10
LOOP_PER_PASS = 0.0


def window_batch(data: Data, ws: list[int], k: int, kv, last_layer: int):
    """Inputs and per-head targets of every position of windows ``ws``: residual states [W, P, d],
    pending tokens [W, P], head-j target positions [W, P, K] (-1 past the window's end), and the
    cross keys/values of those windows."""
    idx = [data.by_window[w] for w in ws]
    n = max(len(i) for i in idx)
    pos = torch.full((len(ws), n), -1, dtype=torch.long)
    tgt = torch.full((len(ws), n, k), -1, dtype=torch.long)
    for r, i in enumerate(idx):
        pos[r, : len(i)] = i
        for j in range(1, k + 1):
            tgt[r, : max(0, len(i) - j), j - 1] = i[j:]
    p = pos.clamp(min=0)
    r = data.states[p, last_layer].float()
    pending = data.labels[p]
    return r, pending, pos, tgt, kv[0][ws].float(), kv[1][ws].float()


def fit_heads(data: Data, heads_cfg, steps: int, windows_per_step: int = 6, lr: float = 2e-3, negatives: int = 2048,
              kl_weight: float = 1.0, seed: int = SEED, log_every: int = 100):
    from asr.draft_heads import DraftHeads

    rt = data.rt
    heads = DraftHeads.from_target(heads_cfg, rt, seed=seed)
    kv = data.cross_kv(heads_cfg.cross_layer)
    rt.model.requires_grad_(False)
    params = [p for p in heads.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    t_ids, t_lps = data.teacher
    vsize = data.head.shape[1]
    train = torch.tensor(data.train_windows)
    last_layer = len(rt.layers) - 1
    losses = []
    for step in range(steps):
        ws = train[torch.randperm(len(train), generator=g)[:windows_per_step]].tolist()
        r, pending, pos, tgt, ck, cv = window_batch(data, ws, heads_cfg.heads, kv, last_layer)
        x = heads(r, pending, ck, cv)  # [W, P, K, d]
        ok = tgt >= 0
        x, t = x[ok], tgt[ok]  # [N, d], target positions
        y, tid, tlp = data.clabels[t], t_ids[t], t_lps[t]
        cand = torch.unique(torch.cat([y[y >= 0], tid.flatten(), torch.randint(vsize, (negatives,), generator=g)]))
        where = torch.full((vsize,), -1, dtype=torch.long)
        where[cand] = torch.arange(len(cand))
        logp = (x @ data.head[:, cand]).log_softmax(-1)
        good = y >= 0
        loss = F.nll_loss(logp[good], where[y[good]])
        if kl_weight:
            tp = tlp.exp()
            tp = tp / tp.sum(-1, keepdim=True)
            loss = loss + kl_weight * (tp * (tp.clamp_min(1e-9).log() - logp.gather(1, where[tid]))).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        for group in opt.param_groups:
            group["lr"] = lr * (1 - (step + 1) / steps)
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            log(f"  heads step {step + 1}/{steps} loss {np.mean(losses[-log_every:]):.3f}")
    return heads.eval().requires_grad_(False), losses


@torch.inference_mode()
def replay(data: Data, heads, windows: list[int], min_confidence: float) -> dict:
    """Replay the speculative loop along the target's greedy sequences of ``windows``: each round starts
    at the state before the pending token, the heads draft (Whisper's rules, confidence stop, end of
    text), the longest agreeing prefix is accepted plus the target's own token. Returns acceptance,
    tokens per verify pass, per-head agreement and the decoder speedup the cost model predicts."""
    k = heads.config.heads
    kv = data.cross_kv(heads.config.cross_layer)
    last_layer = len(data.rt.layers) - 1
    log_min = float(np.log(min_confidence)) if min_confidence > 0 else float("-inf")
    drafted = accepted = passes = tokens = 0
    per_head = np.zeros((k, 2))
    spent = 0.0
    for w in windows:
        r, pending, pos, tgt, ck, cv = window_batch(data, [w], k, kv, last_layer)
        x = heads(r, pending, ck, cv)[0]  # [P, K, d]
        seq = data.meta[w]["tokens"]
        labels = data.labels[pos[0]].tolist()  # label of position i: seq[i + 1] (or end of text)
        n = len(labels)
        logits = data.vocab.logits(x.reshape(n * k, -1)).view(n, k, -1)
        i = 0  # state index: its label (the pending token) is labels[i]
        while i < n:
            draft: list[int] = []
            for j in range(k):
                if i + j + 1 > n:
                    break
                picks, lps = data.vocab.select(logits[i, j : j + 1].clone(), [seq[: i + 2] + draft])
                if float(lps[0]) < log_min:
                    break
                draft.append(picks[0])
                if picks[0] == data.vocab.eot:
                    break
            a = 0
            while a < len(draft) and i + 1 + a < n and draft[a] == labels[i + 1 + a]:
                a += 1
            for j in range(len(draft)):
                if i + 1 + j < n:
                    per_head[j] += (draft[j] == labels[i + 1 + j], 1)
            drafted += len(draft)
            accepted += a
            passes += 1
            emitted = min(a + 1, n - i)
            tokens += emitted
            spent += 1 + VERIFY_PER_EXTRA_TOKEN * len(draft) + DRAFT_ROUND + LOOP_PER_PASS
            i += emitted
    return dict(acceptance=accepted / max(drafted, 1), tokens_per_pass=tokens / max(passes, 1),
                head_agreement=[round(h / max(t, 1), 3) for h, t in per_head],
                predicted_decoder_speedup=tokens / max(spent, 1e-9))


def main() -> int:
    from asr.draft_heads import HeadsConfig, heads_path, save_heads
    from asr.engine import AsrEngine

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="base")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--rank", type=int, default=256)
    ap.add_argument("--cross-layer", type=int, default=5)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--windows", type=int, default=200, help="synthetic espeak-ng windows (collect)")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "exit-adapter")
    ap.add_argument("--out", type=Path, default=ROOT / "asr" / "adapters")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("TRAIN_THREADS", "1")))
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    states = collect(args.model, args.windows, SEED, args.work)
    engine = AsrEngine(args.model)
    data = Data(states, engine)
    rt = engine.runtime
    cfg = HeadsConfig(model=args.model, heads=args.heads, cross_layer=args.cross_layer, rank=args.rank,
                      d_model=rt.d_model, n_head=rt.n_head)
    t = time.perf_counter()
    heads, losses = fit_heads(data, cfg, args.steps)
    fit_s = time.perf_counter() - t
    synth = data.heldout_windows["synthetic"]
    taus = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    sims = {tau: replay(data, heads, synth, tau) for tau in taus}
    tau = max(taus, key=lambda x: sims[x]["predicted_decoder_speedup"])
    log("synthetic held-out: " + json.dumps({str(k): v for k, v in sims.items()}))
    heldout = {name: replay(data, heads, ws, tau) for name, ws in data.heldout_windows.items()}
    path = heads_path(args.model, args.out)
    save_heads(heads, path, min_confidence=tau)
    report = dict(
        model=args.model, config=cfg.__dict__, steps=args.steps, seed=SEED, fit_seconds=round(fit_s, 1),
        loss_first=round(float(np.mean(losses[:20])), 3), loss_last=round(float(np.mean(losses[-20:])), 3),
        min_confidence=tau, bytes_fp32=heads.num_bytes(), file=path.name, file_bytes=path.stat().st_size,
        data=dict(training_positions=int(sum(len(data.by_window[w]) for w in data.train_windows)),
                  training_windows=len(data.train_windows),
                  heldout_windows={n: len(w) for n, w in data.heldout_windows.items()}),
        cost_model=dict(verify_per_extra_token=VERIFY_PER_EXTRA_TOKEN, draft_round=DRAFT_ROUND),
        heldout={n: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for n, r in heldout.items()},
    )
    (args.out / f"{args.model}-heads.json").write_text(json.dumps(report, indent=2) + "\n")
    log(json.dumps(report["heldout"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
