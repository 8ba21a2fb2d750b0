"""The matrix products a LoRA step of bench/lora_speed.sh's Llama cannot skip, timed alone.

Usage: lora_floor.py THREADS BATCH LENGTH R [--bf16] [REPS]

A step of the frozen base with adapters (r R) on q_proj and v_proj must run, per layer, the seven
base products forward and the adapters' four; backward, the base products' input gradients (all but
layer 0's q, k and v, whose input leads to nothing trainable), and each adapter's weight and input
gradients (layer 0's adapters without the input gradient); and the tied head's forward and input
gradient. These are torch.mm calls of those shapes on this torch (the MKL both kiln and Hugging
Face call), in float32 or bf16, on random data. Then the attention's own products, per layer and
(batch, head): the scores q k^T and p v forward, dv, dp, dq and dk backward, as torch.bmm over the
whole [T, T] square, counted at half their time (a causal kernel needs the lower triangle only).
Their time is a floor under either side's step: no step that computes these products in this
precision is faster. Prints both parts, then the floor in ms per step (the last line).
"""

import sys

import torch

import timing

threads, batch, length, r = (int(a) for a in sys.argv[1:5])
bf16 = "--bf16" in sys.argv
rest = [a for a in sys.argv[5:] if a != "--bf16"]
reps = int(rest[0]) if rest else 20
torch.set_num_threads(threads)
dtype = torch.bfloat16 if bf16 else torch.float32
m = batch * length
dim, kv, hidden, vocab, layers, heads, head_dim = 128, 64, 344, 128, 4, 4, 32
base = [(dim, dim), (kv, dim), (kv, dim), (dim, dim), (hidden, dim), (hidden, dim), (dim, hidden)]
adapters = [dim, kv]  # q_proj's and v_proj's output widths

shapes = []  # (rows, inner, cols): [rows, inner] @ [inner, cols]
for layer in range(layers):
    for out, inp in base:
        shapes.append((m, inp, out))  # forward
    for out in adapters:
        shapes += [(m, dim, r), (m, r, out)]  # A x, then B (A x)
    for i, (out, inp) in enumerate(base):
        if layer > 0 or i >= 3:
            shapes.append((m, out, inp))  # the input's gradient
    for out in adapters:
        shapes += [(out, m, r), (m, out, r), (r, m, dim)]  # dB, d(A x), dA
        if layer > 0:
            shapes.append((m, r, dim))  # the adapter's share of the input's gradient
shapes += [(m, dim, vocab), (m, vocab, dim)]  # the tied head, forward and input gradient

pairs = [(torch.randn(a, k, dtype=dtype), torch.randn(k, b, dtype=dtype)) for a, k, b in shapes]
outs = [torch.empty(a, b, dtype=dtype) for a, _, b in shapes]


def products():
    for (x, w), o in zip(pairs, outs):
        torch.mm(x, w, out=o)


# The attention's products of one layer: [B * heads, T, hd] queries (the key/value heads repeated
# for their query heads, as the products see them) and [B * heads, T, T] probabilities.
n = batch * heads
q, k, v, do = (torch.randn(n, length, head_dim, dtype=dtype) for _ in range(4))
p = torch.randn(n, length, length, dtype=dtype)


def attention():
    for _ in range(layers):
        torch.bmm(q, k.transpose(1, 2))  # scores
        torch.bmm(p, v)  # out
        torch.bmm(p.transpose(1, 2), do)  # dv
        torch.bmm(do, v.transpose(1, 2))  # dp
        torch.bmm(p, k)  # dq
        torch.bmm(p.transpose(1, 2), q)  # dk


def median_ms(fn):
    return timing.median_ms(fn, reps)


product_ms = median_ms(products)
attention_ms = median_ms(attention) / 2
flop = sum(2 * a * k * b for a, k, b in shapes)
print(f"{len(shapes)} products, {flop / 1e9:.2f} GFLOP, {product_ms:.2f} ms "
      f"({flop / product_ms / 1e6:.0f} GFLOP/s); the attention's, causal half: {attention_ms:.2f} ms")
print(f"{product_ms + attention_ms:.2f}")
