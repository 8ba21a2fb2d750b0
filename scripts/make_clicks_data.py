#!/usr/bin/env python3
"""Writes click data in the Criteo format from a planted teacher model (issue 56).

Each line: label, 13 integer features, 26 categorical features (8 lowercase hex digits), tab
separated; empty fields occur as in Criteo (an integer feature or a category left blank). The
categorical values are drawn from Zipf-skewed vocabularies (a few values carry most rows, a long
tail is seen once or twice, as in Criteo), and each row's click from a hidden logistic teacher over
per-value weights and log(1 + x) of the integer features. Beside the data, teacher.json holds the
teacher's own test AUC, log loss and normalized entropy: the ceiling no model can pass.

Seeded: the same (--seed, --rows, --test-rows) always writes the same files, chunk by chunk, with
bounded memory whatever the row count.

Usage: make_clicks_data.py --out DIR [--rows N] [--test-rows N] [--seed S] [--gzip]
                           [--vocab-scale F]
--vocab-scale shrinks (or grows) every vocabulary by F (at least 2 values each): a small, quick
set whose values each occur often enough for a model to come near the ceiling (the tests' use).
Writes DIR/train.tsv and DIR/test.tsv (.tsv.gz with --gzip) and DIR/teacher.json.
"""
import argparse
import gzip
import json
import os
import sys

import numpy as np

NUM_DENSE = 13
NUM_SPARSE = 26
# Vocabulary sizes: Criteo Kaggle's cardinalities scaled down, from 3 to 200k values.
VOCAB = [1460, 583, 200000, 50000, 305, 24, 12517, 633, 3, 90000, 5683, 80000, 3194, 27, 14992,
         50000, 10, 5652, 2173, 4, 70000, 18, 15, 29000, 105, 14000]
ZIPF_A = 1.15          # frequency of the k-th most frequent value ~ k^-1.15
DENSE_MISSING = [0.45, 0.0, 0.2, 0.2, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.2]
SPARSE_MISSING = 0.04  # on the features below
SPARSE_WITH_MISSING = (2, 3, 11, 15, 18, 19, 20, 22, 24, 25)
CHUNK = 100_000
CLICK_RATE = 0.25


def teacher(seed, vocab):
    """The hidden model: per-value weights (bigger on frequent values, as learnable signal is),
    dense weights, and one pairwise interaction between two features' value embeddings."""
    rng = np.random.default_rng([seed, 0])
    t = {}
    # Features differ in how much they matter; a value's weight shrinks with its frequency rank,
    # so the tail holds some signal (the ceiling stays above what a model learns from few rows).
    scale = rng.uniform(0.03, 0.3, NUM_SPARSE)
    t["sparse_w"] = []
    for j, v in enumerate(vocab):
        ranks = np.arange(1, v + 2)  # the last slot is the empty value
        w = rng.normal(0, scale[j], v + 1) * (1.0 + 1.0 / np.sqrt(ranks))
        t["sparse_w"].append(w)
    t["dense_w"] = rng.normal(0, 0.12, NUM_DENSE)
    # An interaction: the dot product of two 4-d value embeddings (features 0 and 6).
    t["emb_a"] = rng.normal(0, 0.5, (vocab[0] + 1, 4))
    t["emb_b"] = rng.normal(0, 0.5, (vocab[6] + 1, 4))
    t["hashes"] = [rng.choice(2**32, v, replace=False).astype(np.uint64) for v in vocab]
    t["vocab"] = vocab
    # Zipf probabilities of each vocabulary, in a random value order.
    t["probs"] = []
    for v in vocab:
        p = 1.0 / np.arange(1, v + 1) ** ZIPF_A
        t["probs"].append(np.cumsum(p / p.sum()))
    # The bias that makes the click rate about Criteo's (0.25), found on a sample of its own.
    t["bias"] = 0.0
    _, p, _, _ = draw(t, np.random.default_rng([seed, 3]), 50_000)
    logit = np.log(p / (1 - p))
    lo, hi = -20.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.mean(1 / (1 + np.exp(-(logit + mid)))) < CLICK_RATE else (lo, mid)
    t["bias"] = lo
    return t


def draw(t, rng, n):
    """n rows: labels, click probabilities, dense counts (-1 = empty), value ids (-1 = empty)."""
    dense = np.empty((n, NUM_DENSE), np.int64)
    for i in range(NUM_DENSE):
        mean = 1.5 + 0.4 * i
        x = np.floor(rng.lognormal(mean, 1.2, n)).astype(np.int64)
        if i == 1:  # Criteo's second integer feature has a few negative values
            x[rng.random(n) < 0.05] = -1 - rng.integers(0, 3)
        x[rng.random(n) < DENSE_MISSING[i]] = -(10**9)  # marker for an empty field
        dense[:, i] = x
    ids = np.empty((n, NUM_SPARSE), np.int64)
    for j in range(NUM_SPARSE):
        ids[:, j] = np.minimum(np.searchsorted(t["probs"][j], rng.random(n)), t["vocab"][j] - 1)
        if j in SPARSE_WITH_MISSING:
            ids[rng.random(n) < SPARSE_MISSING, j] = -1
    # The teacher sees what the reader will: empty or negative counts as 0, an empty category as
    # its own value.
    counts = np.where(dense > 0, dense, 0)
    logit = np.log1p(counts) @ t["dense_w"] + t["bias"]
    for j in range(NUM_SPARSE):
        logit += t["sparse_w"][j][np.where(ids[:, j] < 0, t["vocab"][j], ids[:, j])]
    a = t["emb_a"][np.where(ids[:, 0] < 0, t["vocab"][0], ids[:, 0])]
    b = t["emb_b"][np.where(ids[:, 6] < 0, t["vocab"][6], ids[:, 6])]
    logit += (a * b).sum(1)
    p = 1.0 / (1.0 + np.exp(-logit))
    labels = (rng.random(n) < p).astype(np.int64)
    return labels, p, dense, ids


def lines(t, labels, dense, ids):
    cols = [labels.astype(str)]
    for i in range(NUM_DENSE):
        c = dense[:, i].astype(str).astype(object)
        c[dense[:, i] == -(10**9)] = ""
        cols.append(c)
    for j in range(NUM_SPARSE):
        hexes = np.array([f"{h:08x}" for h in t["hashes"][j]] + [""], dtype=object)
        cols.append(hexes[np.where(ids[:, j] < 0, t["vocab"][j], ids[:, j])])
    return "".join("\t".join(row) + "\n" for row in zip(*cols))


def auc(labels, scores):
    """Area under the ROC curve, ties counted half (the Mann-Whitney statistic)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    # Average ranks over ties.
    _, first, counts = np.unique(s, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    pos = labels.sum()
    neg = len(labels) - pos
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def write_split(t, path, seed, split, rows, gz):
    opener = (lambda p: gzip.open(p, "wt", compresslevel=1)) if gz else (lambda p: open(p, "w"))
    all_labels, all_p = [], []
    with opener(path) as f:
        for c, start in enumerate(range(0, rows, CHUNK)):
            n = min(CHUNK, rows - start)
            rng = np.random.default_rng([seed, split, c])
            labels, p, dense, ids = draw(t, rng, n)
            f.write(lines(t, labels, dense, ids))
            all_labels.append(labels)
            all_p.append(p.astype(np.float32))
    return np.concatenate(all_labels), np.concatenate(all_p).astype(np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--rows", type=int, default=100_000, help="training rows")
    ap.add_argument("--test-rows", type=int, default=None, help="test rows (default rows / 10)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--gzip", action="store_true", help="write .tsv.gz")
    ap.add_argument("--vocab-scale", type=float, default=1.0,
                    help="every vocabulary times this (at least 2 values)")
    a = ap.parse_args()
    test_rows = a.test_rows if a.test_rows is not None else max(1, a.rows // 10)
    if a.rows < 1 or test_rows < 1:
        sys.exit("make_clicks_data: error: --rows and --test-rows must be at least 1")
    os.makedirs(a.out, exist_ok=True)
    if a.vocab_scale <= 0:
        sys.exit("make_clicks_data: error: --vocab-scale must be positive")
    vocab = [max(2, int(round(v * a.vocab_scale))) for v in VOCAB]
    t = teacher(a.seed, vocab)
    ext = ".tsv.gz" if a.gzip else ".tsv"
    train_labels, _ = write_split(t, os.path.join(a.out, "train" + ext), a.seed, 1, a.rows, a.gzip)
    labels, p = write_split(t, os.path.join(a.out, "test" + ext), a.seed, 2, test_rows, a.gzip)
    eps = 1e-12
    logloss = float(-np.mean(labels * np.log(p + eps) + (1 - labels) * np.log(1 - p + eps)))
    ctr = float(labels.mean())
    entropy = -(ctr * np.log(ctr) + (1 - ctr) * np.log(1 - ctr)) if 0 < ctr < 1 else float("nan")
    report = {
        "seed": a.seed,
        "train_rows": a.rows,
        "test_rows": test_rows,
        "train_click_rate": float(train_labels.mean()),
        "test_click_rate": ctr,
        "teacher_test_auc": auc(labels, p) if 0 < labels.sum() < len(labels) else None,
        "teacher_test_log_loss": logloss,
        "teacher_test_normalized_entropy": float(logloss / entropy),
        "vocabulary_sizes": vocab,
        "zipf_exponent": ZIPF_A,
    }
    with open(os.path.join(a.out, "teacher.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps({k: report[k] for k in ("train_rows", "test_rows", "test_click_rate",
                                             "teacher_test_auc")}))


if __name__ == "__main__":
    main()
