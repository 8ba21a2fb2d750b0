"""A Python model through kiln's loop (torch.jit.script, kiln's `torchscript` model) against the same
architecture as kiln's own component: the mlp (784 -> 256 -> 256 -> 10) and the cnn of
experiment=fashion_mnist's shape written in Python, float32, the same steps, interleaved in rounds.
Prints training samples/s (kiln's "fit done" line) and the ratio python/kiln.
    PYTHONPATH=build/python .venv/bin/python bench/python_model.py [ROUNDS] [STEPS]"""
import re
import statistics
import sys
import tempfile

import torch

import kiln

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 600


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(784, 256), torch.nn.Linear(256, 256)])
        self.head = torch.nn.Linear(256, 10)

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


if __name__ == "__main__":
    import contextlib
    import io
    import os
    own, python = [], []
    for r in range(rounds):
        for model, out in ((None, own), (Mlp(), python)):
            # kiln logs to the process's stderr (fd 2); catch it around the fit.
            with tempfile.TemporaryDirectory() as tmp:
                saved = os.dup(2)
                with open(tmp + "/log.txt", "w") as log:
                    os.dup2(log.fileno(), 2)
                    try:
                        overrides = ["model=mlp", "model.hidden=[256,256]", "trainer.max_steps=%d" % steps,
                                     "trainer.num_threads=2", "trainer.limit_val_batches=0",
                                     "trainer.num_sanity_val_steps=0", "test=false", "callbacks=none",
                                     "trainer.precision=32", "hydra.run.dir=" + tmp + "/run"]
                        kiln.fit(overrides, model=model)
                    finally:
                        os.dup2(saved, 2)
                        os.close(saved)
                with open(tmp + "/log.txt") as f:
                    samples, seconds = re.findall(r"fit done: .* (\d+) samples in ([\d.]+) s", f.read())[-1]
            out.append(int(samples) / float(seconds))
        print("round %d: kiln mlp %.0f samples/s, Python mlp (TorchScript) %.0f samples/s" % (r + 1, own[-1], python[-1]),
              flush=True)
    a, b = statistics.median(own), statistics.median(python)
    print("median: kiln %.0f, python %.0f samples/s: python/kiln %.3f" % (a, b, b / a))
