"""A Llama folder (kiln export format=hf) as a Qwen3 folder of the same sizes and weights, for
bench/lora_speed.sh's FAMILY=qwen3: Qwen3ForCausalLM with every Llama tensor under its own name, its
heads' q_norm and k_norm at transformers' initial ones, the tokenizer files copied.

usage: as_qwen3.py LLAMA_FOLDER QWEN3_FOLDER
"""

import os
import shutil
import sys

import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM


def main():
    src, dst = sys.argv[1:3]
    llama = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    c = llama.config
    config = Qwen3Config(vocab_size=c.vocab_size, hidden_size=c.hidden_size,
                         intermediate_size=c.intermediate_size,
                         num_hidden_layers=c.num_hidden_layers,
                         num_attention_heads=c.num_attention_heads,
                         num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim,
                         max_position_embeddings=c.max_position_embeddings,
                         rms_norm_eps=c.rms_norm_eps, tie_word_embeddings=c.tie_word_embeddings,
                         rope_parameters=c.rope_parameters)
    qwen = Qwen3ForCausalLM(config)
    missing, unexpected = qwen.load_state_dict(llama.state_dict(), strict=False)
    if unexpected or any("_norm" not in name for name in missing):
        sys.exit("as_qwen3.py: missing %s, unexpected %s" % (missing, unexpected))
    qwen.save_pretrained(dst)
    for name in os.listdir(src):
        if name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(os.path.join(src, name), dst)


if __name__ == "__main__":
    main()
