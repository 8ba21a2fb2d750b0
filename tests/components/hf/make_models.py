"""Hugging Face checkpoints for kiln's interop tests, made by transformers itself: tiny random
models of a family, each save_pretrained()ed into DIR/VARIANT/model (config.json,
model.safetensors) with its logits on 8 rows of fixed ids in DIR/VARIANT/logits.safetensors
(ids, logits), in eval mode and float32. One process makes every variant: importing transformers takes seconds.

  make_models.py FAMILY DIR

Variants: tied (the output layer is the embedding), untied, sharded (tied, in shards of 20 kB
with model.safetensors.index.json). Families: gpt2.
"""
import os
import sys

import torch
from safetensors.torch import save_file


def gpt2(tied):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=97, n_positions=32, n_embd=48, n_layer=2, n_head=4,
                        tie_word_embeddings=tied, bos_token_id=96, eos_token_id=96)
    return GPT2LMHeadModel(config), config.vocab_size


def main():
    family, out = sys.argv[1], sys.argv[2]
    for how in ("tied", "untied", "sharded"):
        torch.manual_seed(11)
        model, vocab = {"gpt2": gpt2}[family](how != "untied")
        if how == "untied":  # a head that differs from the embedding, so a mix-up shows
            with torch.no_grad():
                model.lm_head.weight.normal_(0.0, 0.05)
        model.eval()
        model.save_pretrained(os.path.join(out, how, "model"),
                              **({"max_shard_size": "20KB"} if how == "sharded" else {}))
        ids = torch.randint(0, vocab, (8, 11), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        save_file({"ids": ids.contiguous(), "logits": logits.contiguous()},
                  os.path.join(out, how, "logits.safetensors"))


if __name__ == "__main__":
    main()
