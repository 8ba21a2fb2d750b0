#!/usr/bin/env python3
"""Writes synthetic kiln runs for bench/report_speed.sh: RUNS run folders of STEPS logged steps each,
laid out as `kiln train` lays them out (.hydra/, metrics.csv, test_metrics.yaml, a confusion
matrix, train.log, checkpoints/). Usage: report_runs.py DIR RUNS STEPS"""
import math
import os
import random
import sys

root, runs, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
for r in range(runs):
    rng = random.Random(r)
    lr = [0.1, 0.03, 0.01, 0.003][r % 4]
    seed = r // 4
    d = os.path.join(root, str(r))
    os.makedirs(os.path.join(d, ".hydra"), exist_ok=True)
    os.makedirs(os.path.join(d, "checkpoints"), exist_ok=True)
    with open(os.path.join(d, ".hydra", "overrides.yaml"), "w") as f:
        f.write("- optimizer.lr=%g\n- seed=%d\n" % (lr, seed))
    with open(os.path.join(d, ".hydra", "config.yaml"), "w") as f:
        f.write("seed: %d\noptimizer:\n  _target_: sgd\n  lr: %g\n  momentum: 0.9\n"
                "trainer:\n  max_epochs: 20\n  log_every_n_steps: 1\n"
                "model:\n  _target_: mlp\n  hidden: [256, 128]\n" % (seed, lr))
    epoch_steps = max(1, steps // 20)
    rows = ["step,epoch,lr-SGD,train/acc,train/loss,val/acc,val/loss"]
    for s in range(steps):
        t = s / max(1, steps - 1)
        loss = 2.3 * math.exp(-3 * t * (1 + lr)) + 0.2 + rng.gauss(0, 0.05)
        acc = 1 - loss / 2.6
        lrv = lr * 0.5 * (1 + math.cos(math.pi * t))
        val = ""
        if (s + 1) % epoch_steps == 0:
            val = "%.6g,%.6g" % (acc + 0.01, loss + 0.02)
        else:
            val = ","
        rows.append("%d,%d,%.6g,%.6g,%.6g,%s" % (s, s // epoch_steps, lrv, acc, loss, val))
    with open(os.path.join(d, "metrics.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    with open(os.path.join(d, "test_metrics.yaml"), "w") as f:
        f.write("test/acc: %.4f\ntest/loss: %.4f\n" % (0.85 + rng.random() * 0.05, 0.4 + rng.random() * 0.1))
    with open(os.path.join(d, "test_confusion_matrix.csv"), "w") as f:
        f.write("true/predicted," + ",".join(classes) + "\n")
        for i, c in enumerate(classes):
            f.write(c + "," + ",".join(str(900 if i == j else rng.randint(0, 20)) for j in range(10)) + "\n")
    with open(os.path.join(d, "train.log"), "w") as f:
        f.write("[2026-11-24 10:00:00,000][kiln][INFO] - start\n[2026-11-24 10:12:30,500][kiln][INFO] - done\n")
    with open(os.path.join(d, "checkpoints", "last.ckpt"), "wb") as f:
        f.write(b"\0" * 1024)
