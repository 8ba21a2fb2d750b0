"""Hugging Face checkpoints for kiln's interop tests, made by transformers itself: tiny random
models of a family, each save_pretrained()ed into DIR/VARIANT/model (config.json,
model.safetensors) with its logits on 8 rows of fixed ids in DIR/VARIANT/logits.safetensors
(ids, logits), in eval mode and float32. One process makes every variant: importing transformers takes seconds.

  make_models.py FAMILY DIR

Families and their variants:
  gpt2: tied (the output layer is the embedding), untied, sharded (tied, in shards of 20 kB with
        model.safetensors.index.json);
  llama: tied (grouped-query attention, Llama 3's rope scaling, attention and MLP biases), untied
         (old-style rope_theta/rope_scaling keys: linear scaling), mistral (a sliding window
         shorter than the rows), qwen2 (bias on q, k and v; untied), qwen3 (tied; an RMSNorm of
         each query and key head, their weights drawn off 1; head_dim 16 with hidden 32 and 4
         heads; biases on q, k, v and o; a sliding window on the second layer only), sharded
         (tied).
  bert: bert, roberta, xlm-roberta: *ForSequenceClassification with a tokenizer of their kind
        trained on a few sentences in the same folder (WordPiece with [CLS] A [SEP]; byte-level
        BPE and Unigram with <s> A </s>), the model's vocabulary the tokenizer's; the 8 rows
        of ids have different lengths, padded on the right with the pad id, and transformers
        sees them with the attention mask (logits.safetensors also holds `mask`).
  vit: ViTForImageClassification (logits.safetensors holds `pixels` [8, C, H, W] instead of ids):
       fashion (1 channel, 28x28 in patches of 4, ten labels LABEL_0 ..), rgb (3
       channels, 16x16, no bias on query/key/value, layer_norm_eps 1e-6, three labels).
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


def llama(how):
    import transformers as t
    sizes = dict(vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                 bos_token_id=1, eos_token_id=2, initializer_range=0.2)
    if how == "mistral":
        config = t.MistralConfig(sliding_window=4, tie_word_embeddings=False, **sizes)
        return t.MistralForCausalLM(config), 97
    if how == "qwen2":
        config = t.Qwen2Config(tie_word_embeddings=False, **sizes)
        return t.Qwen2ForCausalLM(config), 97
    if how == "qwen3":
        config = t.Qwen3Config(tie_word_embeddings=True, head_dim=16, attention_bias=True,
                               use_sliding_window=True, sliding_window=4, max_window_layers=1,
                               **sizes)
        model = t.Qwen3ForCausalLM(config)
        with torch.no_grad():  # norms that are not the identity's scale, so a mix-up shows
            for name, p in model.named_parameters():
                if name.endswith(("q_norm.weight", "k_norm.weight")):
                    p.normal_(1.0, 0.3)
        return model, 97
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    config = t.LlamaConfig(tie_word_embeddings=how != "untied", attention_bias=how == "tied",
                           mlp_bias=how == "tied", rope_parameters=rope, **sizes)
    return t.LlamaForCausalLM(config), 97


def old_style_rope(folder):
    """config.json as transformers 4 wrote it: rope_theta and rope_scaling at the top level."""
    import json
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.pop("rope_parameters")
    config["rope_theta"] = 10000.0
    config["rope_scaling"] = {"type": "linear", "factor": 2.0}
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def assert_moves(model, ids, logits, what, **change):
    """The same weights under a config with `change` give logits more than 1e-3 away: what the
    change turns off is something kiln's test can see."""
    other = type(model)(type(model.config)(**dict(model.config.to_dict(), **change)))
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        moved = (other.eval()(input_ids=ids).logits - logits).abs().max().item()
    assert moved > 1e-3, f"{what} moves the logits by only {moved}"
    print(f"{what} moves the logits by {moved:.3g}")


def greedy_reference(model, folder):
    """transformers' greedy generate of N tokens (40, or what fits in GPT-2's positions) after 4
    prompts of different lengths, padded on the left, stopping at the model's eos id:
    DIR/generated.safetensors (ids [4, P] with 0 in the padding, mask [4, P], out [4, N] with 0
    after a row's eos)."""
    gen = torch.Generator().manual_seed(17)
    lengths = (3, 7, 1, 5)
    longest = max(lengths)
    ids = torch.zeros(len(lengths), longest, dtype=torch.long)
    mask = torch.zeros(len(lengths), longest, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, longest - n:] = torch.randint(3, model.config.vocab_size, (n,), generator=gen)
        mask[row, longest - n:] = 1
    positions = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    new = min(40, positions - longest)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                             do_sample=False, pad_token_id=0)
    out = out[:, longest:]
    out = torch.nn.functional.pad(out, (0, new - out.shape[1]))
    save_file({"ids": ids, "mask": mask, "out": out.contiguous()},
              os.path.join(folder, "generated.safetensors"))


def processors_reference(out):
    """transformers' logits processors on fixed scores: DIR/processors.safetensors (scores,
    seen, and one output per option set, named as the test reads them)."""
    from transformers import (LogitsProcessorList, RepetitionPenaltyLogitsProcessor,
                              TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)
    gen = torch.Generator().manual_seed(23)
    scores = torch.randn(3, 50, generator=gen) * 3
    seen = torch.randint(0, 50, (3, 6), generator=gen)
    cases = {"rp1.3": (1.3, None, None, None), "t0.7_k5": (None, 0.7, 5, None),
             "t1_p0.8": (None, 1.0, None, 0.8), "rp1.2_t0.9_k10_p0.9": (1.2, 0.9, 10, 0.9)}
    tensors = {"scores": scores, "seen": seen}
    for name, (rp, t, k, p) in cases.items():
        chain = LogitsProcessorList()
        if rp:
            chain.append(RepetitionPenaltyLogitsProcessor(rp))
        if t:
            chain.append(TemperatureLogitsWarper(t))
        if k:
            chain.append(TopKLogitsWarper(k))
        if p:
            chain.append(TopPLogitsWarper(p))
        tensors[name] = chain(seen, scores.clone()).contiguous()
    save_file(tensors, os.path.join(out, "processors.safetensors"))


SENTENCES = [
    "buy cheap pills now offer", "meeting notes for the team", "call me ishmael",
    "some years ago never mind how long precisely", "the whale is white and the sea is deep",
    "we meet on monday to discuss the budget", "win a free prize today click here",
]


def bert_tokenizer(kind, folder):
    """A tokenizer of the family's kind trained on SENTENCES, saved into `folder`; its size."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers
    from transformers import PreTrainedTokenizerFast
    corpus = SENTENCES * 3
    if kind == "bert":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        tok.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=120,
                                                                  special_tokens=specials))
        tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
        names = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                     mask_token="[MASK]")
    elif kind == "roberta":
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(corpus, trainers.BpeTrainer(
            vocab_size=300, special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
        names = dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                     cls_token="<s>", sep_token="</s>", mask_token="<mask>")
    else:
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        tok.train_from_iterator(corpus, trainers.UnigramTrainer(
            vocab_size=80, special_tokens=specials, unk_token="<unk>"))
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
        names = dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                     cls_token="<s>", sep_token="</s>", mask_token="<mask>")
    PreTrainedTokenizerFast(tokenizer_object=tok, **names).save_pretrained(folder)
    return tok.get_vocab_size()


def bert(kind, folder):
    """A tiny *ForSequenceClassification of `kind` and its tokenizer in `folder`."""
    import transformers as t
    vocab = bert_tokenizer(kind, folder)
    sizes = dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=37, max_position_embeddings=40, initializer_range=0.2)
    if kind == "bert":
        config = t.BertConfig(pad_token_id=0, type_vocab_size=2, num_labels=2, **sizes)
        return t.BertForSequenceClassification(config), 0
    labels = {0: "negative", 1: "neutral", 2: "positive"}
    if kind == "roberta":
        config = t.RobertaConfig(pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
                                 layer_norm_eps=1e-5, id2label=labels, **sizes)
        return t.RobertaForSequenceClassification(config), 1
    config = t.XLMRobertaConfig(pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
                                layer_norm_eps=1e-5, hidden_act="gelu_new", num_labels=2, **sizes)
    return t.XLMRobertaForSequenceClassification(config), 1


def vit(how):
    """A tiny random ViTForImageClassification: `fashion` (Fashion-MNIST's images, ten labels) or
    `rgb` (3 channels, qkv_bias False, another epsilon)."""
    import transformers as t
    sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                 patch_size=4, initializer_range=0.2)
    if how == "fashion":
        config = t.ViTConfig(image_size=28, num_channels=1, num_labels=10, **sizes)
    else:
        config = t.ViTConfig(image_size=16, num_channels=3, qkv_bias=False, layer_norm_eps=1e-6,
                             id2label={0: "cat", 1: "dog", 2: "bird"}, **sizes)
    return t.ViTForImageClassification(config)


def images(config, gen):
    """8 images of the config's channels and size, drawn from `gen` (roughly normalized)."""
    size = config.image_size
    return torch.randn(8, config.num_channels, size, size, generator=gen)


def padded_rows(vocab, pad, gen, length=11):
    """8 rows of ids (none the pad id) of lengths 11, 3, 7, 1, 9, 5, 11, 2, padded on the right
    with `pad`, and their attention mask."""
    lengths = (length, 3, 7, 1, 9, 5, length, 2)
    ids = torch.full((len(lengths), length), pad, dtype=torch.long)
    mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = (torch.randint(0, vocab - 1, (n,), generator=gen) + pad + 1) % vocab
        mask[row, :n] = 1
    return ids, mask


FAMILIES = {
    "gpt2": ("tied", "untied", "sharded"),
    "llama": ("tied", "untied", "mistral", "qwen2", "qwen3", "sharded"),
    "bert": ("bert", "roberta", "xlm-roberta"),
    "vit": ("fashion", "rgb"),
}


def main():
    family, out = sys.argv[1], sys.argv[2]
    for how in FAMILIES[family]:
        torch.manual_seed(11)
        if family == "vit":
            model = vit(how).eval()
            model.save_pretrained(os.path.join(out, how, "model"))
            pixels = images(model.config, torch.Generator().manual_seed(3))
            with torch.no_grad():
                logits = model(pixel_values=pixels).logits
            save_file({"pixels": pixels, "logits": logits.contiguous()},
                      os.path.join(out, how, "logits.safetensors"))
            continue
        if family == "bert":
            folder = os.path.join(out, how, "model")
            model, pad = bert(how, folder)
            model.eval()
            model.save_pretrained(folder)
            ids, mask = padded_rows(model.config.vocab_size, pad, torch.Generator().manual_seed(3))
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=mask).logits
                unmasked = model(input_ids=ids).logits
            # The test can see the padding mask: without it the padded rows' logits move.
            moved = (unmasked - logits).abs().max().item()
            assert moved > 1e-3, f"the padding mask moves the logits by only {moved}"
            save_file({"ids": ids, "mask": mask, "logits": logits.contiguous()},
                      os.path.join(out, how, "logits.safetensors"))
            continue
        if family == "gpt2":
            model, vocab = gpt2(how != "untied")
        else:
            model, vocab = llama(how)
        if how == "untied":  # a head that differs from the embedding, so a mix-up shows
            with torch.no_grad():
                model.lm_head.weight.normal_(0.0, 0.05)
        model.eval()
        model.save_pretrained(os.path.join(out, how, "model"),
                              **({"max_shard_size": "20KB"} if how == "sharded" else {}))
        if how == "untied" and family == "llama":
            # Rewritten as transformers 4 wrote it, then read back by transformers: the reference
            # logits are what transformers computes from that file.
            old_style_rope(os.path.join(out, how, "model"))
            model = type(model).from_pretrained(os.path.join(out, how, "model")).eval()
        ids = torch.randint(0, vocab, (8, 11), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        if family == "llama" and how == "tied":
            # The test can see the rope scaling: without it the logits move.
            plain = {"rope_type": "default", "rope_theta": model.config.rope_parameters["rope_theta"]}
            assert_moves(model, ids, logits, "rope scaling", rope_parameters=plain)
        if how == "mistral":  # and the window: attending to the whole past moves the logits
            assert_moves(model, ids, logits, "the sliding window", sliding_window=None)
        if how == "qwen3":  # its one windowed layer
            assert_moves(model, ids, logits, "qwen3's sliding window", use_sliding_window=False,
                         layer_types=["full_attention"] * model.config.num_hidden_layers)
        save_file({"ids": ids.contiguous(), "logits": logits.contiguous()},
                  os.path.join(out, how, "logits.safetensors"))
        if how in ("tied", "mistral", "qwen2", "qwen3"):
            greedy_reference(model, os.path.join(out, how))
    processors_reference(out)


if __name__ == "__main__":
    main()
