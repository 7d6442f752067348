"""Model-independent speculative decoding: what the Whisper and the LLM post-edit loops share.

The split follows vLLM's spec_decode proposer/scorer: a *drafter* proposes tokens (this package: the
interface, prompt lookup, token maps, the model-drafter skeleton), each model's own loop *scores*
them in one target pass with its own logit rules and KV cache (``specwhisper.asr.decoding.speculative``,
``specwhisper.postedit.speculative``), and both loops keep tokens by the same acceptance rule,
adapt the draft length by the same lookahead policy and count with the same counters.

- :mod:`.drafter`: the ``Drafter`` base (batched ``propose(contexts, ks)``; batch 1 is a batch of one)
- :mod:`.acceptance`: the acceptance rule (longest draft prefix equal to the target's greedy tokens,
  plus the target's own token)
- :mod:`.lookahead`: the dynamic draft length
- :mod:`.stats`: the counters
- :mod:`.lookup`: prompt-lookup drafters (n-gram over the batch, copy from a source text)
- :mod:`.token_map`: same vocabulary / re-tokenised text between two tokenizers
- :mod:`.model_drafter`: a smaller model drafting greedily over a per-model ``DraftRuntime`` adapter
- :mod:`.draft_steps`: a round's drafts as the verify pass takes them: a drafter model's kept on the
  device, read with the verdict

Nothing here loads or calls a model: the adapters live with the models (asr, postedit); a drafter
model's tokens pass through as tensors on its device.
"""
