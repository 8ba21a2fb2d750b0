"""What the Python tests share: a small Fashion-MNIST run's overrides, and a run's trained weights."""
import os
import struct
import subprocess

FASHION = "/usr/share/datasets/fashion-mnist"


def have_fashion() -> bool:
    return os.path.exists(FASHION + "/t10k-labels-idx1-ubyte.gz")


def small_run(run_dir):
    return ["model=mlp", "model.hidden=[16]", "trainer.max_steps=30", "trainer.num_threads=1",
            "trainer.limit_val_batches=2", "trainer.num_sanity_val_steps=0", "seed=3", "hydra.run.dir=" + run_dir]


def weights(kiln_command, run_dir, out_dir, env=None):
    """The data section of the run's last.ckpt exported as safetensors (the header names the source)."""
    subprocess.run(list(kiln_command) + ["export", "run_dir=" + run_dir, "ckpt_path=last", "hydra.run.dir=" + out_dir],
                   check=True, capture_output=True, env=env)
    with open(os.path.join(out_dir, "model.safetensors"), "rb") as f:
        blob = f.read()
    return blob[8 + struct.unpack("<Q", blob[:8])[0]:]
