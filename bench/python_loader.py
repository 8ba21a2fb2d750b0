"""kiln's loader feeding a Python loop against torch's DataLoader (num_workers=2), one epoch of
Fashion-MNIST's training images each, with the same transforms, interleaved in rounds:
  augmented: to_tensor, random_crop(28, padding 2), horizontal_flip, normalize (random per sample,
             so kiln cannot precompute them)
  plain:     to_tensor, normalize (deterministic: kiln applies them once at setup, precompute_mb)
Prints samples/s of each and the ratio kiln/torch.
    PYTHONPATH=build/python .venv/bin/python bench/python_loader.py [ROUNDS]"""
import gzip
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torchvision
import torchvision.transforms as T

import kiln

FASHION = "/usr/share/datasets/fashion-mnist"
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.set_num_threads(1)


def torch_dataset(tmp, transform):
    raw = os.path.join(tmp, "FashionMNIST", "raw")
    if not os.path.isdir(raw):
        os.makedirs(raw)
        for name in os.listdir(FASHION):
            with gzip.open(os.path.join(FASHION, name)) as src, open(os.path.join(raw, name[:-3]), "wb") as dst:
                shutil.copyfileobj(src, dst)
    return torchvision.datasets.FashionMNIST(tmp, train=True, download=False, transform=transform)


def kiln_module(augmented):
    cfg = kiln.compose(overrides=["data=fashion_mnist", "data.num_workers=2"])["data"]
    steps = [{"_target_": "to_tensor"}]
    if augmented:
        steps += [{"_target_": "random_crop", "size": 28, "padding": 2}, {"_target_": "horizontal_flip", "p": 0.5}]
    steps += [{"_target_": "normalize", "mean": [0.2860], "std": [0.3530]}]
    cfg["transforms"] = {"train": steps, "eval": steps}
    return kiln.data_module(cfg, seed=1)


def epoch(loader, key):
    n, t0 = 0, time.perf_counter()
    for batch in loader:
        n += (batch[key] if key else batch[0]).shape[0]
    return n / (time.perf_counter() - t0)


with tempfile.TemporaryDirectory() as tmp:
    for augmented in (True, False):
        steps = [T.ToTensor()]
        if augmented:
            steps += [T.RandomCrop(28, padding=2), T.RandomHorizontalFlip()]
        steps += [T.Normalize((0.2860,), (0.3530,))]
        torch_loader = torch.utils.data.DataLoader(torch_dataset(tmp, T.Compose(steps)), batch_size=128, shuffle=True,
                                                   num_workers=2)
        kiln_loader = kiln_module(augmented).train_loader()
        k, t = [], []
        for r in range(rounds):
            k.append(epoch(kiln_loader, "input"))
            t.append(epoch(torch_loader, None))
        name = "augmented" if augmented else "plain"
        print("%-9s kiln %8.0f samples/s, torch DataLoader %7.0f samples/s (medians of %d): kiln/torch %.2fx"
              % (name, statistics.median(k), statistics.median(t), rounds, statistics.median(k) / statistics.median(t)),
              flush=True)
