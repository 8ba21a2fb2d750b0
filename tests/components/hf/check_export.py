"""What transformers makes of folders kiln exported (kiln export format=hf): each DIR loads with
AutoModelForCausalLM.from_pretrained (AutoModelForSequenceClassification for a
*ForSequenceClassification, AutoModelForImageClassification for a ViTForImageClassification),
with no missing, unexpected or mismatched tensor, and its logits on 8 rows of ids drawn from seed 5 go to DIR/transformers_logits.safetensors (ids, logits), in eval mode
and float32. A classifier's rows have different lengths, padded on the right with its
pad_token_id, and transformers sees them with the attention mask (saved as `mask`); an image
classifier sees 8 images drawn from the same seed (saved as `pixels`, instead of ids). One process
for every folder: importing transformers takes seconds.

  check_export.py DIR...
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, AutoModelForImageClassification,
                          AutoModelForSequenceClassification)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_models import images, padded_rows  # noqa: E402


def main():
    for folder in sys.argv[1:]:
        with open(os.path.join(folder, "config.json")) as f:
            architecture = json.load(f)["architectures"][0]
        classifier = architecture.endswith("ForSequenceClassification")
        vision = architecture.endswith("ForImageClassification")
        auto = (AutoModelForSequenceClassification if classifier else
                AutoModelForImageClassification if vision else AutoModelForCausalLM)
        model, info = auto.from_pretrained(folder, output_loading_info=True)
        problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        if problems:
            sys.exit("%s: %s" % (folder, problems))
        model.eval()
        config = model.config
        gen = torch.Generator().manual_seed(5)
        tensors = {}
        if vision:
            pixels = images(config, gen)
            with torch.no_grad():
                logits = model(pixel_values=pixels).logits
            tensors["pixels"] = pixels
        elif classifier:
            ids, mask = padded_rows(config.vocab_size, config.pad_token_id, gen)
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=mask).logits
            tensors["mask"] = mask
        else:
            length = min(11, getattr(config, "n_positions", None) or config.max_position_embeddings)
            ids = torch.randint(0, model.config.vocab_size, (8, length), generator=gen)
            with torch.no_grad():
                logits = model(input_ids=ids).logits
        if not vision:
            tensors["ids"] = ids.contiguous()
        tensors["logits"] = logits.contiguous()
        save_file(tensors, os.path.join(folder, "transformers_logits.safetensors"))
        labels = ", id2label %s" % config.id2label if classifier or vision else ""
        print("%s: %s, %d tensors%s" % (folder, type(model).__name__, len(model.state_dict()), labels))


if __name__ == "__main__":
    main()
