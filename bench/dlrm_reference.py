#!/usr/bin/env python3
"""Baselines for kiln's clicks_dlrm (issue 56): DLRM trained by the DLRM reference's recipe and by
TorchRec, on the same Criteo-format file, tables, MLP sizes, batch and rows as kiln.

--impl reference_sgd      dlrm_s_pytorch.py's model: one nn.EmbeddingBag(sum, sparse=True) per
                          feature, tables uniform in +-sqrt(1/rows), MLPs Xavier-normal, dot
                          interaction (strict upper triangle) beside the bottom MLP's output,
                          sigmoid + BCELoss, torch.optim.SGD on everything (the reference's default
                          optimizer; lr 0.1 as its Criteo scripts use).
--impl reference_rowwise  the same model with kiln's optimizer: row-wise Adagrad on the tables'
                          sparse gradients (FBGEMM's EXACT_ROWWISE_ADAGRAD: acc[r] += mean(g_r^2),
                          w_r -= lr * g_r / (sqrt(acc[r]) + eps)) and fused Adam on the MLPs.
--impl dense_floor        not a DLRM: the same model and step with the 26 lookups replaced by one
                          constant [batch, 26, dim] tensor (no tables, no sparse gradient, no
                          sparse optimizer): what the dense part alone (MLPs, interaction, loss,
                          Adam) costs. A DLRM step with these MLPs cannot be faster than this
                          unless its dense math is, so floor/torchrec bounds any speed-up over
                          TorchRec that comes from the embedding side. Its test AUC means nothing.
--impl torchrec           torchrec.models.dlrm.DLRM over an EmbeddingBagCollection, sharded by
                          DistributedModelParallel on one CPU process (Gloo), its tables in FBGEMM's
                          batched kernel with RowWiseAdagrad fused into the backward
                          (apply_optimizer_in_backward), Adam on the MLPs.

The data is read as kiln's criteo reader does (components/recsys/criteo_line.cc): an empty or
negative count is 0, counts saturate at 2^31 - 1 and the model takes log(1 + x); a category is its
hex hash modulo the table's rows, an empty one 0. Training uses a seeded (1 - val_fraction) share of
the rows, as many as kiln trains on, in a shuffled order; the test AUC is on the whole test file.
Parsed rows are cached beside the data (FILE.rows-N.npz) so a round times training only.

Prints one line: `RESULT impl=... samples_per_s=... test_auc=... train_rows=... seconds=...`
(seconds and samples/s of the training loop alone, the data already in memory).
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

NUM_DENSE, NUM_SPARSE = 13, 26
INT_MAX = 2**31 - 1


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", choices=["reference_sgd", "reference_rowwise", "dense_floor", "torchrec"])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--max-rows", type=int, default=0, help="0: every row (kiln's data.max_rows)")
    ap.add_argument("--num-embeddings", type=int, default=100000, help="rows of every table")
    ap.add_argument("--embedding-dim", type=int, default=16)
    ap.add_argument("--bottom", default="64,16", help="bottom MLP sizes (model.dense_arch_layer_sizes)")
    ap.add_argument("--top", default="128,64,1", help="top MLP sizes (model.over_arch_layer_sizes)")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--val-fraction", type=float, default=0.05, help="rows kept out, as kiln's")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.1, help="SGD's learning rate (reference_sgd)")
    ap.add_argument("--dense-lr", type=float, default=1e-3, help="Adam's (rowwise, torchrec)")
    ap.add_argument("--sparse-lr", type=float, default=0.1, help="row-wise Adagrad's (clicks_dlrm's)")
    ap.add_argument("--sparse-eps", type=float, default=1e-8)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--device", default="cpu",
                    help="where the reference sides train (cuda: the model on the GPU, each batch "
                         "copied there from pinned host memory, as kiln's loader does; not torchrec)")
    ap.add_argument("--prepare", action="store_true", help="only parse and cache the files")
    return ap.parse_args()


def read_criteo(path, num_embeddings, max_rows):
    """(dense float32 log(1 + count) [N, 13], indices int64 [N, 26], labels float32 [N])."""
    cache = f"{path}.rows-{max_rows}.mod-{num_embeddings}.npz"
    if os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(path):
        z = np.load(cache)
        return z["dense"], z["sparse"], z["labels"]
    import pandas as pd

    frame = pd.read_csv(path, sep="\t", header=None, dtype=str, keep_default_na=False,
                        nrows=max_rows or None, engine="c")
    assert frame.shape[1] == 1 + NUM_DENSE + NUM_SPARSE, f"{path}: {frame.shape[1]} fields"
    labels = frame[0].astype(np.float32).to_numpy()
    dense = np.empty((len(frame), NUM_DENSE), np.float32)
    for i in range(NUM_DENSE):
        counts = pd.to_numeric(frame[1 + i].replace("", "0")).to_numpy(np.float64)
        dense[:, i] = np.log1p(np.clip(counts, 0, INT_MAX)).astype(np.float32)
    sparse = np.empty((len(frame), NUM_SPARSE), np.int64)
    for j in range(NUM_SPARSE):
        column = frame[1 + NUM_DENSE + j]
        sparse[:, j] = [int(h, 16) % num_embeddings if h else 0 for h in column]
    np.savez(cache, dense=dense, sparse=sparse, labels=labels)
    return dense, sparse, labels


def auc(scores, labels):
    """Area under the ROC curve (Mann-Whitney, tied scores counted half)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s), np.float64)
    bounds = np.flatnonzero(np.diff(s)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(s)]])
    for a, b in zip(starts, ends):  # average rank of each tie group
        ranks[a:b] = (a + b + 1) / 2.0
    y = labels[order] > 0.5
    pos = y.sum()
    neg = len(y) - pos
    return (ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg)


class ReferenceDLRM(torch.nn.Module):
    """dlrm_s_pytorch.py's DLRM_Net with --arch-interaction-op=dot, single process."""

    def __init__(self, num_embeddings, dim, bottom, top, rng):
        super().__init__()
        self.bot = self._mlp([NUM_DENSE] + bottom, rng, sigmoid_last=False)
        self.emb = torch.nn.ModuleList()
        for _ in range(NUM_SPARSE):
            bag = torch.nn.EmbeddingBag(num_embeddings, dim, mode="sum", sparse=True)
            bound = np.sqrt(1.0 / num_embeddings)
            w = rng.uniform(-bound, bound, (num_embeddings, dim)).astype(np.float32)
            bag.weight.data = torch.from_numpy(w)
            self.emb.append(bag)
        n = NUM_SPARSE + 1
        self.top = self._mlp([dim + n * (n - 1) // 2] + top, rng, sigmoid_last=True)
        li, lj = torch.triu_indices(n, n, offset=1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.register_buffer("offsets", torch.zeros(0, dtype=torch.int64))
        self.pooled = None  # dense_floor: a constant [batch, 26, dim] in place of the lookups

    @staticmethod
    def _mlp(sizes, rng, sigmoid_last):
        layers = []
        for n, m in zip(sizes[:-1], sizes[1:]):
            linear = torch.nn.Linear(n, m)
            w = rng.normal(0.0, np.sqrt(2.0 / (m + n)), (m, n)).astype(np.float32)
            b = rng.normal(0.0, np.sqrt(1.0 / m), m).astype(np.float32)
            linear.weight.data = torch.from_numpy(w)
            linear.bias.data = torch.from_numpy(b)
            layers += [linear, torch.nn.ReLU()]
        if sigmoid_last:
            layers[-1] = torch.nn.Sigmoid()
        return torch.nn.Sequential(*layers)

    def forward(self, dense, sparse):
        x = self.bot(dense)
        batch = x.shape[0]
        if self.pooled is not None:
            t = torch.cat([x.unsqueeze(1), self.pooled[:batch]], dim=1)
        else:
            # one value per bag, as Criteo has
            offsets = torch.arange(batch, dtype=torch.int64, device=x.device)
            ly = [bag(sparse[:, j].contiguous(), offsets) for j, bag in enumerate(self.emb)]
            t = torch.cat([x] + ly, dim=1).view(batch, -1, x.shape[1])
        z = torch.bmm(t, t.transpose(1, 2))
        r = torch.cat([x, z[:, self.li, self.lj]], dim=1)
        return self.top(r).squeeze(1)


class RowwiseAdagrad:
    """FBGEMM's EXACT_ROWWISE_ADAGRAD on sparse gradients, touched rows only."""

    def __init__(self, params, lr, eps):
        self.params, self.lr, self.eps = list(params), lr, eps
        self.acc = [torch.zeros(p.shape[0], device=p.device) for p in self.params]

    @torch.no_grad()
    def step(self):
        for p, acc in zip(self.params, self.acc):
            g = p.grad.coalesce()
            rows, values = g.indices()[0], g.values()
            a = acc.index_add_(0, rows, values.pow(2).mean(1))[rows]
            p.index_add_(0, rows, values * (-self.lr / (a.sqrt() + self.eps)).unsqueeze(1))
            p.grad = None


def train_reference(args, data, rng):
    bottom = [int(v) for v in args.bottom.split(",")]
    top = [int(v) for v in args.top.split(",")]
    model = ReferenceDLRM(args.num_embeddings, args.embedding_dim, bottom, top, rng).to(args.device)
    loss_fn = torch.nn.BCELoss()
    tables = [bag.weight for bag in model.emb]
    dense_params = list(model.bot.parameters()) + list(model.top.parameters())
    if args.impl == "reference_sgd":
        opts = [torch.optim.SGD(model.parameters(), lr=args.lr)]
    elif args.impl == "dense_floor":
        model.pooled = torch.randn(max(args.batch_size, 4096), NUM_SPARSE, args.embedding_dim,
                                   device=args.device) * 0.01
        opts = [torch.optim.Adam(dense_params, lr=args.dense_lr, fused=True)]
    else:
        opts = [RowwiseAdagrad(tables, args.sparse_lr, args.sparse_eps),
                torch.optim.Adam(dense_params, lr=args.dense_lr, fused=True)]

    def step(dense, sparse, labels):
        for p in dense_params:
            p.grad = None
        loss = loss_fn(model(dense, sparse), labels)
        loss.backward()
        for opt in opts:
            opt.step()
        if args.impl == "reference_sgd":
            for p in tables:
                p.grad = None

    seconds = run_epoch(step, data, args.batch_size, args.device)
    model.eval()
    return seconds, lambda dense, sparse: model(dense.to(args.device), sparse.to(args.device)).cpu()


def train_torchrec(args, data):
    import torch.distributed as dist
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.models.dlrm import DLRM
    from torchrec.optim import RowWiseAdagrad
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    keys = [f"cat_{j}" for j in range(NUM_SPARSE)]
    tables = [EmbeddingBagConfig(name=f"t_{k}", embedding_dim=args.embedding_dim,
                                 num_embeddings=args.num_embeddings, feature_names=[k])
              for k in keys]
    model = DLRM(embedding_bag_collection=EmbeddingBagCollection(tables=tables, device=torch.device("meta")),
                 dense_in_features=NUM_DENSE,
                 dense_arch_layer_sizes=[int(v) for v in args.bottom.split(",")],
                 over_arch_layer_sizes=[int(v) for v in args.top.split(",")],
                 dense_device=torch.device("cpu"))
    apply_optimizer_in_backward(RowWiseAdagrad, model.sparse_arch.parameters(),
                                {"lr": args.sparse_lr, "eps": args.sparse_eps})
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=1, compute_device="cpu"))
    plan = planner.collective_plan(model, None, dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(module=model, device=torch.device("cpu"), plan=plan)
    print("torchrec plan:", str(plan).replace("\n", " ")[:300], file=sys.stderr)
    dense_params = [p for _, p in in_backward_optimizer_filter(dmp.named_parameters())]
    dense_opt = torch.optim.Adam(dense_params, lr=args.dense_lr, fused=True)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    lengths_cache = {}

    def kjt(sparse):
        batch = sparse.shape[0]
        if batch not in lengths_cache:
            lengths_cache[batch] = torch.ones(batch * NUM_SPARSE, dtype=torch.int32)
        return KeyedJaggedTensor(keys=keys, values=sparse.t().reshape(-1),
                                 lengths=lengths_cache[batch])

    def step(dense, sparse, labels):
        dense_opt.zero_grad(set_to_none=True)
        loss = loss_fn(dmp(dense, kjt(sparse)).squeeze(1), labels)
        loss.backward()  # the tables step here, fused
        dense_opt.step()

    seconds = run_epoch(step, data, args.batch_size, "cpu")
    dmp.eval()
    predict = lambda dense, sparse: torch.sigmoid(dmp(dense, kjt(sparse)).squeeze(1))  # noqa: E731
    return seconds, predict


def run_epoch(step, data, batch_size, device):
    """Seconds of one pass over DATA in batches; on a GPU each batch is copied there from pinned
    host memory without blocking, and the clock stops when the device is done."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        data = [a.pin_memory() for a in data]
        torch.cuda.synchronize()
    dense, sparse, labels = data
    start = time.perf_counter()
    for b in range(0, len(labels), batch_size):
        batch = (dense[b:b + batch_size], sparse[b:b + batch_size], labels[b:b + batch_size])
        if cuda:
            batch = [a.to(device, non_blocking=True) for a in batch]
        step(*batch)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    args = parse_args()
    if args.impl == "torchrec" and args.device != "cpu":
        sys.exit("dlrm_reference.py: --impl torchrec runs on the CPU only here (FBGEMM's CPU build)")
    torch.set_num_threads(args.threads)
    train = read_criteo(args.train, args.num_embeddings, args.max_rows)
    test = read_criteo(args.test, args.num_embeddings, args.max_rows)
    if args.prepare:
        return
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    n = len(train[2])
    keep = rng.permutation(n)[: n - int(round(n * args.val_fraction))]
    data = [torch.from_numpy(np.ascontiguousarray(a[keep])) for a in train]
    if args.impl == "torchrec":
        seconds, predict = train_torchrec(args, data)
    else:
        seconds, predict = train_reference(args, data, rng)
    scores = []
    with torch.no_grad():
        for b in range(0, len(test[2]), 4096):
            scores.append(predict(torch.from_numpy(test[0][b:b + 4096]),
                                  torch.from_numpy(test[1][b:b + 4096])).numpy())
    test_auc = auc(np.concatenate(scores).astype(np.float64), test[2])
    rows = len(keep)
    print(f"RESULT impl={args.impl} samples_per_s={rows / seconds:.0f} test_auc={test_auc:.4f} "
          f"train_rows={rows} seconds={seconds:.1f}", flush=True)


if __name__ == "__main__":
    main()
