"""The reference for bench/fsdp_speed.sh: PyTorch's FSDP2 (torch.distributed.fsdp.fully_shard) on
the GPT of bench/gpt_reference.py (kiln's `gpt` layout), each block a unit and the model the root,
over Gloo on this machine's loopback, WORLD processes started with torch.multiprocessing. Each rank
trains on its own random blocks of the Moby Dick characters: AdamW with kiln's groups (decay for
matrices), gradient clipping at 1.0 by the global norm, float32. Prints, from rank 0, the global
tokens/s over the timed steps, the largest peak resident memory of the ranks in MB, and the last
loss.

usage: fsdp_reference.py WORLD STEPS WARMUP BATCH BLOCK DIM DEPTH HEADS MLP_DIM [TEXT] [--ddp]
  BATCH is per rank. --ddp: DistributedDataParallel instead (every rank holds the whole model)."""
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

from gpt_reference import Gpt


def worker(rank, world, args, port, ddp):
    steps, warmup, batch, block, dim, depth, heads, mlp_dim = args[:8]
    path = args[8]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    # The cores shared among the ranks, as kiln's workers share them.
    torch.set_num_threads(max(1, os.cpu_count() // world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i + 5 for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    model = Gpt(128, block, dim, depth, heads, mlp_dim)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
        named = model.module.named_parameters()
    else:
        from torch.distributed.fsdp import fully_shard
        for b in model.h:
            fully_shard(b)
        fully_shard(model)
        named = model.named_parameters()
    decay, no_decay = [], []
    for _, p in named:
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=2e-3, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(1000 + rank)
    start = time.perf_counter()
    for step in range(warmup + steps):
        if step == warmup:
            dist.barrier()
            start = time.perf_counter()
        ix = torch.randint(len(data) - block - 1, (batch,), generator=gen)
        x = torch.stack([data[i:i + block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"{world * steps * batch * block / seconds:.1f} {peak.item():.0f} {loss.item():.4f}", flush=True)
    dist.barrier()
    # Gloo's teardown in destroy_process_group aborts at exit in this torch ("terminate called
    # without an active exception"); the figures are out, so leave without it.
    os._exit(0)


def main():
    argv = sys.argv[1:]
    ddp = "--ddp" in argv
    args = [a for a in argv if not a.startswith("--")]
    world = int(args[0])
    nums = list(map(int, args[1:9]))
    path = args[9] if len(args) > 9 else "data/text/mobydick/train.txt"
    port = 29600 + os.getpid() % 1000
    mp.spawn(worker, args=(world, nums + [path], port, ddp), nprocs=world)


if __name__ == "__main__":
    main()
