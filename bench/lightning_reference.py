"""PyTorch Lightning itself, on the same models, data and settings as kiln, for bench/lightning_speed.sh:
  cnn: the Fashion-MNIST CNN of bench/pytorch_reference.py (batch 128, AdamW lr 2e-3, weight decay
       0.01), the whole normalized training set in memory, batches taken by index_select
       (no per-sample work), channels-last when asked. Prints samples/s.
  gpt: the Moby Dick GPT of bench/gpt_reference.py (random blocks of the character stream, AdamW with
       decay on matrices only, gradient clipping at 1.0 through the Trainer). Prints tokens/s.
  llama: experiment=mobydick_llama's Llama as transformers' LlamaForCausalLM (dim 128, 4 layers, 4
       heads, 2 key/value heads, SwiGLU 344, tied embeddings, SDPA attention), trained as the gpt.
Lightning 2.x's Trainer runs the loop (accelerator cpu, or gpu with --device cuda; one device;
precision 32-true or bf16-mixed), with nothing else on: no logger, checkpointing, progress bar, model
summary or sanity check. The timed window is steps WARMUP .. WARMUP+TIMED, measured by a callback at
batch boundaries (on a GPU after torch.cuda.synchronize() at both ends).

usage: lightning_reference.py cnn|gpt|llama WARMUP TIMED THREADS [--bf16] [--channels-last] [GPT ARGS]
                              [--device DEVICE] [--matmul-precision highest|high|medium]
  GPT ARGS: BATCH BLOCK DIM DEPTH HEADS MLP_DIM [TEXT] (llama: 2 key/value heads)
  --device DEVICE: cpu (default) or cuda[:N]. The batches are made in host memory as on the CPU;
      with cuda the DataLoader pins them (pin_memory=True) and Lightning copies them to the GPU
      with non_blocking=True, as kiln's trainer and the raw loops do.
  --matmul-precision P: torch.set_float32_matmul_precision(P) (default: not called, "highest")
The allocator settings are the caller's: bench/*.sh run this with kiln's GLIBC_TUNABLES."""
import sys
import time
import warnings

import torch
from torch.nn import functional as F

import pytorch_lightning as pl

import gpt_reference
import pytorch_reference


class Timer(pl.Callback):
    def __init__(self, warmup, timed, items_per_step, device=torch.device("cpu")):
        self.warmup, self.timed, self.items = warmup, timed, items_per_step
        self.device = device
        self.start = self.seconds = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == self.warmup:
            pytorch_reference.synchronize(self.device)
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.warmup + self.timed:
            pytorch_reference.synchronize(self.device)
            self.seconds = time.perf_counter() - self.start

    def rate(self):
        return self.timed * self.items / self.seconds


class Batches(torch.utils.data.IterableDataset):
    """Batches made by a generator function: Lightning's loop pulls them through a DataLoader with
    batch_size=None and no workers, so no per-sample work is added."""

    def __init__(self, make):
        self.make = make

    def __iter__(self):
        return self.make()


class CnnModule(pl.LightningModule):
    def __init__(self, channels_last):
        super().__init__()
        self.model = pytorch_reference.Cnn()
        self.channels_last = channels_last
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return F.cross_entropy(self.model(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=0.002, weight_decay=0.01, fused=True)


class GptModule(pl.LightningModule):
    def __init__(self, block, dim, depth, heads, mlp_dim, fused, llama=False):
        super().__init__()
        if llama:
            from transformers import LlamaConfig, LlamaForCausalLM
            config = LlamaConfig(vocab_size=128, hidden_size=dim, num_hidden_layers=depth,
                                 num_attention_heads=heads, num_key_value_heads=2,
                                 intermediate_size=mlp_dim, max_position_embeddings=block,
                                 tie_word_embeddings=True, rms_norm_eps=1e-6,
                                 attn_implementation="sdpa")
            self.model = LlamaForCausalLM(config)
        else:
            self.model = gpt_reference.Gpt(128, block, dim, depth, heads, mlp_dim)
        self.llama = llama
        self.fused = fused

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(input_ids=x).logits if self.llama else self.model(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=0)

    def configure_optimizers(self):
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.dim() < 2]
        # Lightning refuses gradient clipping with a fused optimizer under its mixed-precision plugin
        # (even bf16, which has no scaler): there the fastest it allows, foreach.
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                 lr=2e-3, betas=(0.9, 0.99), fused=self.fused, foreach=not self.fused)


def gpt_batches(path, batch, block):
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i + 5 for i, c in enumerate(chars)}  # ids 0-4 are the specials, as in kiln
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)

    def make():
        while True:
            ix = torch.randint(len(data) - block - 1, (batch,))
            yield (torch.stack([data[i:i + block] for i in ix]), torch.stack([data[i + 1:i + 1 + block] for i in ix]))

    return make


def main():
    argv = sys.argv[1:]
    device = pytorch_reference.device_options(argv)
    flags = [a for a in argv if a.startswith("--")]
    args = [a for a in argv if not a.startswith("--")]
    which, warmup, timed, threads = args[0], int(args[1]), int(args[2]), int(args[3])
    bf16 = "--bf16" in flags
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if which == "cnn":
        module = CnnModule("--channels-last" in flags)
        make, items, clip = (lambda: pytorch_reference.tensor_batches(128)), 128, None
    else:
        batch, block, dim, depth, heads, mlp_dim = map(int, args[4:10])
        path = args[10] if len(args) > 10 else "data/text/mobydick/train.txt"
        module = GptModule(block, dim, depth, heads, mlp_dim, fused=not bf16, llama=which == "llama")
        make, items, clip = gpt_batches(path, batch, block), batch * block, 1.0
    timer = Timer(warmup, timed, items, device)
    warnings.filterwarnings("ignore")  # "no val_dataloader", "few workers": deliberate here
    if device.type == "cuda":
        accelerator, devices = "gpu", [device.index] if device.index is not None else 1
    else:
        accelerator, devices = device.type, 1
    trainer = pl.Trainer(accelerator=accelerator, devices=devices, precision="bf16-mixed" if bf16 else "32-true",
                         max_steps=warmup + timed, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         gradient_clip_val=clip, callbacks=[timer])
    # With a GPU the loader pins each batch (in this process: no workers), and Lightning's
    # batch_to_device copies it with non_blocking=True.
    loader = torch.utils.data.DataLoader(Batches(make), batch_size=None, num_workers=0,
                                         pin_memory=device.type == "cuda")
    trainer.fit(module, train_dataloaders=loader)
    print(f"{timer.rate():.1f}")


if __name__ == "__main__":
    main()
