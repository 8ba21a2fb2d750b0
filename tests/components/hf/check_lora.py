"""LoRA adapters between kiln and peft, both ways, on a folder BASE (make_models.py's):
  - KILN_ADAPTER (kiln wrote it): PeftModel.from_pretrained(base, KILN_ADAPTER) must load every
    adapter tensor; its logits on 8 rows of ids go to KILN_ADAPTER/peft_logits.safetensors;
  - PEFT_ADAPTER: peft makes an adapter of its own (r 4, alpha 8 on the comma-separated TARGETS,
    lora_B drawn at random rather than zero, so it changes the logits) and save_pretrained()s it
    there, with its logits in PEFT_ADAPTER/peft_logits.safetensors.
One process for both: importing transformers and peft takes seconds.

  check_lora.py BASE KILN_ADAPTER [PEFT_ADAPTER TARGETS]
"""
import os
import sys

import torch
from safetensors.torch import save_file


def logits(model, folder):
    ids = torch.randint(0, model.config.vocab_size, (8, 11), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out = model.eval()(input_ids=ids).logits
    save_file({"ids": ids, "logits": out.contiguous()}, os.path.join(folder, "peft_logits.safetensors"))


def main():
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM
    base, kiln_adapter = sys.argv[1:3]
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), kiln_adapter)
    loaded = [n for n, _ in model.named_parameters() if "lora_B" in n]
    if not loaded or all(float(p.abs().sum()) == 0 for n, p in model.named_parameters() if "lora_B" in n):
        sys.exit("%s: peft loaded no trained lora_B" % kiln_adapter)
    logits(model, kiln_adapter)
    if len(sys.argv) < 4:
        print("ok: %d adapted layers" % len(loaded))
        return
    peft_adapter = sys.argv[3]
    torch.manual_seed(9)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=sys.argv[4].split(","), lora_dropout=0.0,
                        init_lora_weights=False, task_type="CAUSAL_LM",
                        fan_in_fan_out=AutoModelForCausalLM.from_pretrained(base).config.model_type == "gpt2")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), config)
    model.save_pretrained(peft_adapter)
    logits(model, peft_adapter)
    print("ok: %d adapted layers" % len(loaded))


if __name__ == "__main__":
    main()
