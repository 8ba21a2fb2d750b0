"""LoRA adapters between kiln and peft, both ways, on a folder BASE (make_models.py's):
  - KILN_ADAPTER (kiln wrote it): PeftModel.from_pretrained(base, KILN_ADAPTER) must load every
    adapter tensor; its logits on 8 rows of ids go to KILN_ADAPTER/peft_logits.safetensors;
  - PEFT_ADAPTER: peft makes an adapter of its own (r 4, alpha 8 on the comma-separated TARGETS
    or PEFT's all-linear, which it saves as the layers' full names,
    lora_B drawn at random rather than zero, so it changes the logits) and save_pretrained()s it
    there, with its logits in PEFT_ADAPTER/peft_logits.safetensors.
A *ForSequenceClassification base is PEFT's SEQ_CLS task: its head trains whole and is saved with
the adapters (peft's own head is redrawn here too, so that loading it shows in the logits); its
ids avoid the pad id, which kiln masks.
One process for both: importing transformers and peft takes seconds.

  check_lora.py BASE KILN_ADAPTER [PEFT_ADAPTER TARGETS [rslora|dora|patterns|layers|regex|bias_all|bias_lora_only[+lora_bias]|tied|tokens|tokens_head]]

A target that is a token embedding gets peft's lora.Embedding (its A and B drawn at random and
scaled to 0.3), and peft saves an adapted embed_tokens' table beside it, moved here so that
loading it shows; with tied (a base whose head is its embedding), peft's default is kept: the head
reads the base's table.

With rslora, peft's adapter is rsLoRA's (use_rslora=True: scaled by alpha / sqrt(r)); with dora,
DoRA's (use_dora=True), its magnitudes moved off the row norms they start at, as training moves them;
with patterns, a Llama's v_proj adapters at r 2 (rank_pattern) and layer 0's q_proj at alpha 16
(alpha_pattern); with layers, the second block's layers only (layers_to_transform [1],
layers_pattern "layers"); with regex, TARGETS is one regular expression (target_modules as a
string), beside exclude_modules ".*\\.(o|k)_proj" and rank_pattern {"layers\\.1\\.mlp\\..*": 2};
with bias_all or bias_lora_only, PEFT's bias="all" or "lora_only", the trained biases moved off the
base's; +lora_bias after either, lora_bias=True too (lora_B's bias drawn as nn.Linear draws it);
with tokens, PEFT's trainable tokens of the input embeddings (trainable_token_indices [3, 5, 7], the
rows moved off the base's); with tokens_head, those of {"embed_tokens": ..., "lm_head": ...} (an
untied head's rows too).
Every row of ids starts with tokens 3, 5 and 7, so that trained rows of them show in the logits.
"""
import os
import sys

import torch
from safetensors.torch import save_file


TOKENS = [3, 5, 7]


def auto_class(base):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification
    archs = AutoConfig.from_pretrained(base).architectures or []
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return AutoModelForSequenceClassification, "SEQ_CLS"
    return AutoModelForCausalLM, "CAUSAL_LM"


def logits(model, folder, task):
    low = model.config.pad_token_id + 1 if task == "SEQ_CLS" else 0
    ids = torch.randint(low, model.config.vocab_size, (8, 11), generator=torch.Generator().manual_seed(5))
    ids[:, :3] = torch.tensor(TOKENS)
    with torch.no_grad():
        out = model.eval()(input_ids=ids).logits
    save_file({"ids": ids, "logits": out.contiguous()}, os.path.join(folder, "peft_logits.safetensors"))


def main():
    from peft import LoraConfig, PeftModel, get_peft_model
    base, kiln_adapter = sys.argv[1:3]
    auto, task = auto_class(base)
    model = PeftModel.from_pretrained(auto.from_pretrained(base), kiln_adapter)
    loaded = [n for n, _ in model.named_parameters() if "lora_B" in n]
    if not loaded or all(float(p.abs().sum()) == 0 for n, p in model.named_parameters() if "lora_B" in n):
        sys.exit("%s: peft loaded no trained lora_B" % kiln_adapter)
    logits(model, kiln_adapter, task)
    if len(sys.argv) < 4:
        print("ok: %d adapted layers" % len(loaded))
        return
    peft_adapter = sys.argv[3]
    torch.manual_seed(9)
    targets = sys.argv[4] if sys.argv[4] == "all-linear" else sys.argv[4].split(",")
    patterns = {}
    if sys.argv[5:6] == ["patterns"]:
        patterns = dict(rank_pattern={"v_proj": 2}, alpha_pattern={"model.layers.0.self_attn.q_proj": 16})
    if sys.argv[5:6] == ["layers"]:
        patterns = dict(layers_to_transform=[1], layers_pattern="layers")
    if sys.argv[5:6] == ["regex"]:
        targets = sys.argv[4]
        patterns = dict(exclude_modules=r".*\.(o|k)_proj", rank_pattern={r"layers\.1\.mlp\..*": 2})
    if sys.argv[5:6] == ["tokens"]:
        patterns = dict(trainable_token_indices=TOKENS)
    if sys.argv[5:6] == ["tokens_head"]:
        patterns = dict(trainable_token_indices={"embed_tokens": TOKENS, "lm_head": TOKENS})
    if sys.argv[5:6] and sys.argv[5].startswith("bias_"):
        bias, _, lora_bias = sys.argv[5][5:].partition("+")
        patterns = dict(bias=bias, lora_bias=lora_bias == "lora_bias")
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0,
                        init_lora_weights=False, task_type=task,
                        use_rslora=sys.argv[5:6] == ["rslora"], use_dora=sys.argv[5:6] == ["dora"],
                        **patterns,
                        fan_in_fan_out=auto.from_pretrained(base).config.model_type == "gpt2")
    model = get_peft_model(auto.from_pretrained(base), config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "modules_to_save" in name:
                p.normal_(0, 0.3)
            if p.requires_grad and name.endswith(".bias") and "modules_to_save" not in name:
                p.add_(0.3 * torch.randn_like(p))
            if "lora_embedding_" in name:
                p.mul_(0.3)  # drawn from a standard normal, both (init_lora_weights=False)
            if name.endswith("embed_tokens.base_layer.weight"):
                # peft saves this table beside its adapter (a vocabulary grown in fine-tuning, say):
                # moved, so that the other side's logits show whether it loaded.
                p.add_(0.05 * torch.randn_like(p))
            if "trainable_tokens_delta" in name:
                p.add_(0.3 * torch.randn_like(p))
            if "lora_magnitude_vector" in name:
                p.mul_(1 + 0.2 * torch.randn_like(p))
    model.save_pretrained(peft_adapter)
    logits(model, peft_adapter, task)
    print("ok: %d adapted layers" % len(loaded))


if __name__ == "__main__":
    main()
