"""The reference for bench/fashion_mnist_speed.sh: the same CNN as kiln's `cnn` model (conv 32 ->
conv 64 with BatchNorm and max-pool, FC 128, FC 10), batch 128, AdamW (fused, as kiln's), 2 threads, trained on
Fashion-MNIST with a plain PyTorch loop. Prints samples/s over the timed batches.

usage: pytorch_reference.py WARMUP TIMED torchvision|numpy|tensors [WORKERS] [--channels-last] [--bf16]
                            [--threads N] [--device DEVICE] [--matmul-precision highest|high|medium]
  torchvision: torchvision.datasets.FashionMNIST with ToTensor() and Normalize(), the usual loop
               (DataLoader with WORKERS workers, default 2)
  numpy:       the decoded arrays indexed directly through a DataLoader
  tensors:     the whole normalized training set in one tensor, batches taken by index_select in
               the training loop (no DataLoader): the fastest plain loop, the fair baseline
  --channels-last  model and inputs in channels-last order (as kiln's experiment=fashion_mnist)
  --bf16           the forward pass and the loss under torch.autocast(DEVICE's type, torch.bfloat16)
  --threads N      torch.set_num_threads(N) (default 2)
  --device DEVICE  where the model and the optimizer live (default cpu). The data stays in host
                   memory and each batch is copied over per step: pinned, then a non-blocking copy
                   (as kiln's trainer does, and Lightning with a pin_memory DataLoader). With a GPU
                   the timer synchronizes the device at both ends of the timed window.
  --matmul-precision P  torch.set_float32_matmul_precision(P) (default: not called, "highest")
FASHION_MNIST_ROOT in the environment replaces the data folder (default below).
The allocator settings are the caller's: bench/*.sh run this with kiln's GLIBC_TUNABLES."""
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
from torch import nn

ROOT = os.environ.get("FASHION_MNIST_ROOT") or "/usr/share/datasets/fashion-mnist"


def take_option(argv, name, default=None):
    """Removes `NAME VALUE` or `NAME=VALUE` from argv (a list, changed in place) and returns VALUE,
    or default where it is absent: the positional and --flag parsing then sees the rest as before."""
    for i, a in enumerate(argv):
        if a == name:
            if i + 1 >= len(argv):
                sys.exit(f"{name} needs a value")
            value = argv[i + 1]
            del argv[i:i + 2]
            return value
        if a.startswith(name + "="):
            del argv[i]
            return a[len(name) + 1:]
    return default


def device_options(argv):
    """The --device and --matmul-precision options (taken out of argv): returns the torch.device, and
    sets the float32 matmul precision where one is given."""
    device = torch.device(take_option(argv, "--device", "cpu"))
    precision = take_option(argv, "--matmul-precision")
    if precision is not None:
        if precision not in ("highest", "high", "medium"):
            sys.exit(f"--matmul-precision: highest, high or medium, not {precision}")
        torch.set_float32_matmul_precision(precision)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit(f"--device {device}: no CUDA device is available to torch {torch.__version__}")
        if device.index is not None:
            torch.cuda.set_device(device)
    return device


def synchronize(device):
    """Waits for the device's queued work (a no-op on the CPU): the timers read the clock after it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def to_device(t, device):
    """A host batch onto the device: pinned first (index_select's output is pageable), then copied
    without blocking the host, as kiln's Strategy::ToDevice; the tensor itself on the CPU."""
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class FashionMnist(torch.utils.data.Dataset):
    def __init__(self):
        self.images = read_idx(f"{ROOT}/train-images-idx3-ubyte.gz")
        self.labels = read_idx(f"{ROOT}/train-labels-idx1-ubyte.gz").astype(np.int64)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        image = torch.from_numpy(self.images[i].astype(np.float32) / 255.0).unsqueeze(0)
        return (image - 0.2860) / 0.3530, self.labels[i]


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)
        self.dropout = nn.Dropout(0.25)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        x = self.dropout(torch.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


def torchvision_dataset(work_dir):
    import os
    import shutil
    import torchvision
    from torchvision import transforms

    # torchvision reads the uncompressed files from ROOT/FashionMNIST/raw/ (it would download them).
    raw = os.path.join(work_dir, "FashionMNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    for name in ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"]:
        with gzip.open(f"{ROOT}/{name}.gz", "rb") as src, open(os.path.join(raw, name), "wb") as dst:
            shutil.copyfileobj(src, dst)
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.2860,), (0.3530,))])
    return torchvision.datasets.FashionMNIST(work_dir, train=True, transform=tf, download=False)


def tensor_batches(batch_size):
    """Batches of the whole training set held in memory as one normalized tensor, reshuffled every
    epoch, taken by index_select: no DataLoader, no per-sample work."""
    images = read_idx(f"{ROOT}/train-images-idx3-ubyte.gz")
    labels = torch.from_numpy(read_idx(f"{ROOT}/train-labels-idx1-ubyte.gz").astype(np.int64))
    x = (torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1) - 0.2860) / 0.3530
    while True:
        order = torch.randperm(len(labels))
        for i in range(0, len(order) - batch_size + 1, batch_size):
            idx = order[i:i + batch_size]
            yield x.index_select(0, idx), labels.index_select(0, idx)


def main():
    argv = sys.argv[1:]
    threads = int(take_option(argv, "--threads", "2"))
    device = device_options(argv)
    flags = [a for a in argv if a.startswith("--")]
    args = [a for a in argv if not a.startswith("--")]
    warmup, timed, mode = int(args[0]), int(args[1]), args[2]
    workers = int(args[3]) if len(args) > 3 else 2
    channels_last, bf16 = "--channels-last" in flags, "--bf16" in flags
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if mode == "tensors":
        loader = tensor_batches(128)
    else:
        if mode == "torchvision":
            import tempfile
            dataset = torchvision_dataset(tempfile.mkdtemp())
        else:
            dataset = FashionMnist()
        loader = torch.utils.data.DataLoader(dataset, batch_size=128, shuffle=True, num_workers=workers,
                                             drop_last=True, persistent_workers=workers > 0)
    model = Cnn().to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=0.002, weight_decay=0.01, fused=True)
    model.train()
    seen, start = 0, None
    for step, (x, y) in enumerate(loader):
        if step == warmup:
            synchronize(device)
            start, seen = time.perf_counter(), 0
        if step == warmup + timed:
            break
        x, y = to_device(x, device), to_device(y, device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += x.shape[0]
    synchronize(device)
    print(f"{seen / (time.perf_counter() - start):.1f}")


if __name__ == "__main__":
    main()
