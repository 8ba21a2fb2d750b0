"""The Python baseline of the JPEG loading benchmark: torchvision's ImageFolder (PIL decode) with
ImageNet training transforms, batched by torch's DataLoader, timed in images per second.

    .venv/bin/python bench/jpeg_torchvision.py DATA_DIR [--batches 40] [--batch-size 128]
        [--workers 2] [--rounds 2] [--seed 0]

DATA_DIR is a folder of class folders (DATA_DIR/CLASS/IMAGE.jpg), or the OUT_DIR of
bench/make_jpeg_set.py (its train/ is used then). The pipeline is the usual one:
    datasets.ImageFolder(root, transform=Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
                                                  ToTensor(), Normalize(ImageNet mean, std)]))
    DataLoader(batch_size=128, num_workers=2, shuffle=True, persistent_workers=True)
Each round starts a new pass over the loader (the workers persist between rounds), takes one
warm-up batch untimed (in round 0 that includes starting the workers), then times the next
--batches batches, and prints one line:
    torchvision images_per_s=1234.5 round=0 batches=40 batch_size=128 workers=2 seconds=4.15
The timed window opens once the warm-up batch is in hand, when the workers have already started
on the next batches (the DataLoader prefetches 2 per worker), so the figure is the steady rate,
maybe a few percent high for short runs. A pass holds len(dataset) // batch_size batches at most;
1 + --batches must fit in it (10,000 images at 128: 78 batches).

Threads: decoding and transforms run in the worker processes, which the DataLoader sets to one
intra-op thread each. The main process only receives the collated batches, so it is set to one
thread too (torch.set_num_threads(1)): with 2 workers on a 2-core machine, a main process with
its default thread pool would only compete with them for the cores.
"""
import argparse
import os
import sys
import time

import PIL
import torch
import torchvision
from torchvision import datasets, transforms

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir")
    ap.add_argument("--batches", type=int, default=40, help="timed batches per round (default 40)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.workers < 1:
        ap.error("--workers must be at least 1 (persistent_workers needs worker processes)")

    root = a.data_dir
    if os.path.isfile(os.path.join(root, "make_jpeg_set.json")) and os.path.isdir(os.path.join(root, "train")):
        root = os.path.join(root, "train")
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)

    transform = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    dataset = datasets.ImageFolder(root, transform=transform)
    loader = torch.utils.data.DataLoader(dataset, batch_size=a.batch_size, num_workers=a.workers, shuffle=True,
                                         persistent_workers=True)
    if a.batches + 1 > len(dataset) // a.batch_size:
        sys.exit(f"jpeg_torchvision: 1 + {a.batches} batches of {a.batch_size} do not fit in one pass over "
                 f"{len(dataset)} images")
    print(f"# torch={torch.__version__} torchvision={torchvision.__version__} pillow={PIL.__version__} "
          f"images={len(dataset)} classes={len(dataset.classes)} root={root} cpus={os.cpu_count()}", flush=True)

    for r in range(a.rounds):
        it = iter(loader)
        x, _ = next(it)  # warm-up batch, untimed
        assert x.shape[1:] == (3, 224, 224) and x.dtype == torch.float32, x.shape
        n, t0 = 0, time.perf_counter()
        for _ in range(a.batches):
            x, y = next(it)
            n += x.shape[0]
        secs = time.perf_counter() - t0
        del it
        print(f"torchvision images_per_s={n / secs:.1f} round={r} batches={a.batches} batch_size={a.batch_size} "
              f"workers={a.workers} seconds={secs:.2f}", flush=True)


if __name__ == "__main__":
    main()
