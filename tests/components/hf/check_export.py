"""What transformers makes of folders kiln exported (kiln export format=hf): each DIR loads with
AutoModelForCausalLM.from_pretrained, with no missing, unexpected or mismatched tensor, and its
logits on 8 rows of ids drawn from seed 5 go to DIR/transformers_logits.safetensors (ids,
logits), in eval mode and float32. One process for every folder: importing transformers takes seconds.

  check_export.py DIR...
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    for folder in sys.argv[1:]:
        model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
        problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        if problems:
            sys.exit("%s: %s" % (folder, problems))
        model.eval()
        config = model.config
        length = min(11, getattr(config, "n_positions", None) or config.max_position_embeddings)
        ids = torch.randint(0, model.config.vocab_size, (8, length), generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        save_file({"ids": ids.contiguous(), "logits": logits.contiguous()},
                  os.path.join(folder, "transformers_logits.safetensors"))
        print("%s: %s, %d tensors" % (folder, type(model).__name__, len(model.state_dict())))


if __name__ == "__main__":
    main()
