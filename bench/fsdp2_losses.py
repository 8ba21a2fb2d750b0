"""kiln's trainer.strategy=fsdp and PyTorch's FSDP2 (fully_shard) take the same steps: the GPT of
bench/gpt_reference.py (kiln's `gpt` layout) from the same initial weights, on the same blocks of
Moby Dick in the same order, at WORLD workers over Gloo, float32, AdamW (decay on matrices),
clipping at 1.0, a constant learning rate. Prints rank 0's loss every 10 steps from both, and
from PyTorch's DDP on the same steps, and the largest relative differences from FSDP2: kiln's,
and DDP's (two PyTorch strategies that differ only in the order of float32 sums; the scale of
what "the same" can mean after many steps).

How the two are made to meet:
- weights: the reference's initialization (torch.manual_seed(0)) is written as safetensors under
  kiln's parameter names, and kiln starts from it (model.init_from);
- token ids: kiln's `char` tokenizer (the most frequent characters of the training text first,
  ties in byte order, ids from 5 after the specials), computed here the same way;
- batches: kiln with trainer.overfit_batches=STEPS*WORLD reads the first STEPS*WORLD*BATCH blocks
  in order, and its distributed sampler gives rank r the blocks r, r+WORLD, r+2*WORLD, ...; block
  s starts at token s*BLOCK (stride 0). The reference's ranks take the same ones.

usage: [BATCH=16 BLOCK=128 DIM=128 DEPTH=4 HEADS=4 MLP_DIM=512] \
       python bench/fsdp2_losses.py [WORLD] [STEPS] [TEXT]    (defaults 2, 50, the prepared text)
Needs build/bin/kiln and the prepared text data (scripts/prepare_text_data.sh)."""
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpt_reference import Gpt  # noqa: E402

# The model and batch of bench/fsdp_speed.sh, from the same variables (its defaults), so that the
# steps it times are these.
BATCH, BLOCK, DIM, DEPTH, HEADS, MLP = (int(os.environ.get(k, d)) for k, d in (
    ("BATCH", 16), ("BLOCK", 128), ("DIM", 128), ("DEPTH", 4), ("HEADS", 4), ("MLP_DIM", 512)))


def kiln_char_ids(text):
    counts = Counter(text)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].encode("utf-8")))
    return {c: i + 5 for i, (c, _) in enumerate(ranked[:128 - 5])}


def kiln_name(name):
    # The reference's names (nanoGPT's, one level flatter) as kiln's gpt has them.
    parts = name.split(".")
    if parts[0] != "h":
        return "transformer." + name
    n, rest = parts[1], ".".join(parts[2:])
    for ref, kiln in (("c_attn", "attn.c_attn"), ("c_proj", "attn.c_proj"), ("c_fc", "mlp.c_fc"),
                      ("mlp_proj", "mlp.c_proj")):
        if rest.startswith(ref + "."):
            rest = kiln + rest[len(ref):]
    return f"transformer.h.{n}.{rest}"


def worker(rank, world, steps, stream, init, port, out, ddp):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(max(1, os.cpu_count() // world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = Gpt(128, BLOCK, DIM, DEPTH, HEADS, MLP)
    model.load_state_dict(init)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard
        for b in model.h:
            fully_shard(b)
        fully_shard(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=2e-3, betas=(0.9, 0.99))
    losses = []
    for step in range(steps):
        blocks = [rank + world * (step * BATCH + j) for j in range(BATCH)]
        x = torch.stack([stream[s * BLOCK:s * BLOCK + BLOCK] for s in blocks])
        y = torch.stack([stream[s * BLOCK + 1:s * BLOCK + BLOCK + 1] for s in blocks])
        loss = F.cross_entropy(model(x).view(-1, 128), y.view(-1), ignore_index=0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    if rank == 0:
        with open(out, "w") as f:
            json.dump(losses, f)
    dist.barrier()
    os._exit(0)  # Gloo's teardown aborts at exit in this torch (see fsdp_reference.py)


def main():
    args = sys.argv[1:]
    world = int(args[0]) if len(args) > 0 else 2
    steps = int(args[1]) if len(args) > 1 else 50
    root = os.path.dirname(HERE)
    path = args[2] if len(args) > 2 else os.path.join(root, "data/text/mobydick/train.txt")
    text = open(path, encoding="utf-8").read()
    ids = kiln_char_ids(text)
    stream = torch.tensor([ids.get(c, 1) for c in text], dtype=torch.long)  # 1: <unk>
    torch.manual_seed(0)
    init = Gpt(128, BLOCK, DIM, DEPTH, HEADS, MLP).state_dict()
    work = tempfile.mkdtemp()
    from safetensors.torch import save_file
    weights = os.path.join(work, "init.safetensors")
    save_file({kiln_name(k): v.contiguous() for k, v in init.items() if k != "lm_head.weight"}, weights)

    def reference(ddp):
        out = os.path.join(work, "ddp.json" if ddp else "fsdp2.json")
        port = 29700 + os.getpid() % 1000 + (1 if ddp else 0)
        mp.spawn(worker, args=(world, steps, stream, init, port, out, ddp), nprocs=world)
        return json.load(open(out))

    fsdp2, ddp = reference(False), reference(True)

    run = os.path.join(work, "kiln")
    cmd = [os.path.join(root, "build/bin/kiln"), "train", "experiment=mobydick_gpt", f"data.train=[{path}]",
           f"hydra.run.dir={run}", f"trainer.devices={world}", "trainer.strategy=fsdp", "trainer.precision=32",
           "scheduler.warmup_steps=0", "scheduler.min_lr=0.002", "model.dropout=0.0", f"model.dim={DIM}", f"model.depth={DEPTH}",
           f"model.heads={HEADS}", f"model.mlp_dim={MLP}", f"data.block_size={BLOCK}", f"data.batch_size={BATCH}",
           f"trainer.overfit_batches={steps * world}", f"trainer.max_steps={steps}", "trainer.max_time=null",
           "trainer.limit_val_batches=0", "trainer.num_sanity_val_steps=0", "test=false", "callbacks=none",
           "logger=jsonl", "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false",
           f"+model.init_from={weights}", "+model.init_ignore=[tokenizer_fingerprint]"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"kiln train failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    kiln = {}
    for line in open(os.path.join(run, "metrics.jsonl")):
        row = json.loads(line)
        if "train/loss" in row:
            kiln[row["step"]] = row["train/loss"]
    kiln_losses = [kiln[s] for s in sorted(kiln)]
    print(f"GPT dim {DIM}, {DEPTH} blocks; {world} workers x batch {BATCH} x block {BLOCK}; {steps} steps")
    # PyTorch's DDP against its FSDP2 on the same steps: how far float32 sums taken in another order
    # drift apart, the scale for kiln's difference.
    print(f"{'step':>5} {'kiln fsdp':>12} {'FSDP2':>12} {'PyTorch DDP':>12} {'kiln/FSDP2':>11} {'DDP/FSDP2':>10}")
    worst, floor = 0.0, 0.0
    for i, (a, b, c) in enumerate(zip(kiln_losses, fsdp2, ddp)):
        rel, base = abs(a - b) / abs(b), abs(c - b) / abs(b)
        worst, floor = max(worst, rel), max(floor, base)
        if i < 3 or i % 10 == 9 or i == len(fsdp2) - 1:
            print(f"{i + 1:>5} {a:>12.6f} {b:>12.6f} {c:>12.6f} {rel:>11.2e} {base:>10.2e}")
    print(f"steps compared: {min(len(kiln_losses), len(fsdp2))} of {steps}; largest relative difference from FSDP2: "
          f"kiln {worst:.2e}, PyTorch DDP {floor:.2e}")


if __name__ == "__main__":
    main()
