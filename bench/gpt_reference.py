"""The reference for bench/mobydick_gpt_speed.sh: the same GPT as kiln's `gpt` model (nanoGPT's
layout: token + learned position embeddings, pre-LayerNorm blocks with causal self-attention and a
tanh-GELU MLP, final LayerNorm, output tied to the embedding), trained on Moby Dick characters with
a plain PyTorch Python loop: random blocks of the token stream, AdamW, gradient clipping at 1.0.
Prints tokens/s over all timed steps (the first step included, as kiln's epoch time includes it).

usage: gpt_reference.py STEPS THREADS BATCH BLOCK DIM DEPTH HEADS MLP_DIM [TEXT] [--bf16]
                        [--warmup N] [--device DEVICE] [--matmul-precision highest|high|medium]
  --bf16: the forward pass and the loss under torch.autocast(DEVICE's type, torch.bfloat16)
  --warmup N: N untimed steps before the STEPS timed ones (default 0: the first step is timed)
  --device DEVICE: where the model and the optimizer live (default cpu). The token stream stays in
      host memory; each batch is cut there, pinned and copied over without blocking the host (as
      kiln's trainer does). With a GPU the timer synchronizes the device at both ends.
  --matmul-precision P: torch.set_float32_matmul_precision(P) (default: not called, "highest")
The allocator settings are the caller's: bench/*.sh run this with kiln's GLIBC_TUNABLES."""
import math
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

from pytorch_reference import device_options, synchronize, take_option, to_device


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_dim):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, mlp_dim)
        self.mlp_proj = nn.Linear(mlp_dim, dim)

    def forward(self, x, bias):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.c_attn(self.ln_1(x)).view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(hd)) + bias, dim=-1)
        x = x + self.c_proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, block, dim, depth, heads, mlp_dim):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block, dim)
        self.h = nn.ModuleList([Block(dim, heads, mlp_dim) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        bias = torch.full((t, t), float("-inf"), device=idx.device).triu(1)
        for block in self.h:
            x = block(x, bias)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    argv = sys.argv[1:]
    warmup = int(take_option(argv, "--warmup", "0"))
    device = device_options(argv)
    bf16 = "--bf16" in argv
    args = [a for a in argv if not a.startswith("--")]
    steps, threads, batch, block, dim, depth, heads, mlp_dim = map(int, args[0:8])
    path = args[8] if len(args) > 8 else "data/text/mobydick/train.txt"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i + 5 for i, c in enumerate(chars)}  # ids 0-4 are the specials, as in kiln
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    model = Gpt(128, block, dim, depth, heads, mlp_dim).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=2e-3, betas=(0.9, 0.99), fused=True)
    synchronize(device)
    start = time.perf_counter()
    for step in range(warmup + steps):
        if step == warmup and warmup > 0:
            synchronize(device)
            start = time.perf_counter()
        ix = torch.randint(len(data) - block - 1, (batch,))
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
        x, y = to_device(x, device), to_device(y, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    synchronize(device)
    seconds = time.perf_counter() - start
    print(f"{steps * batch * block / seconds:.1f}")


if __name__ == "__main__":
    main()
