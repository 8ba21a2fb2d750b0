"""transformers' side of bench/generation_speed.sh: greedy generate of NEW tokens after BATCH prompts
of 16 random ids from a Llama of SIZE in DIR (written here first when DIR has no config.json), in
float32 or bf16, on THREADS threads; the prompts go to DIR/ids_BATCH.safetensors for kiln. Prints one JSON line: tokens/s (generated tokens of all rows
over the wall time of generate, the fastest of CALLS calls after a warm-up) and the generated ids' checksum.

  generation_reference.py DIR BATCH NEW PRECISION THREADS [SIZE=tiny|small]
"""
import json
import os
import sys
import time

import torch

CALLS = int(os.environ.get("CALLS", "5"))  # timed calls after the warm-up; the fastest counts

SIZES = {
    # experiment=mobydick_llama's shape: what kiln trains in minutes on this machine.
    "tiny": dict(vocab_size=128, hidden_size=128, intermediate_size=344, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    # A Llama tokenizer's vocabulary: the output layer's 8 M weights dominate each token.
    "small": dict(vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False),
}


def make(folder, size):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(max_position_embeddings=512, bos_token_id=1, eos_token_id=2, **SIZES[size])
    LlamaForCausalLM(config).save_pretrained(folder)


def main():
    folder, batch, new, precision, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    torch.set_num_threads(threads)
    if not os.path.exists(os.path.join(folder, "config.json")):
        make(folder, sys.argv[6] if len(sys.argv) > 6 else "tiny")
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
    model.eval()
    ids = torch.randint(3, model.config.vocab_size, (batch, 16), generator=torch.Generator().manual_seed(1))
    from safetensors.torch import save_file
    save_file({"ids": ids}, os.path.join(folder, "ids_%d.safetensors" % batch))  # kiln's prompts
    mask = torch.ones_like(ids)
    seconds = float("inf")
    for call in range(1 + CALLS):  # the first call warms up; the fastest of the others counts
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                 do_sample=False, pad_token_id=0, eos_token_id=None)
        if call > 0:
            seconds = min(seconds, time.perf_counter() - start)
    generated = out[:, ids.shape[1]:]
    print(json.dumps({"side": "transformers", "tokens_per_s": generated.numel() / seconds,
                      "checksum": int(generated.sum())}))


if __name__ == "__main__":
    main()
