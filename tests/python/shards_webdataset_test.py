"""Shards between kiln and WebDataset (the PyPI package, pinned in scripts/python/test.txt):
`kiln shard` of an image folder is read by webdataset with the same keys and bytes as the source
files, and shards written by webdataset's ShardWriter train in kiln (data=shards). Also `kiln shard`'s
index and shard rollover, and its one-line refusals. Run by ctest with the .venv's Python."""
import glob
import hashlib
import io
import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

import numpy as np
import webdataset as wds
from PIL import Image

KILN = os.environ["KILN_BINARY"]


def jpeg(seed, size=(48, 40)):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size[1], 0:size[0]]
    image = np.stack([(x * 5 + seed) % 256, (y * 6) % 256, rng.integers(0, 256, size=(size[1], size[0]))], -1)
    out = io.BytesIO()
    Image.fromarray(image.astype(np.uint8)).save(out, format="JPEG", quality=90)
    return out.getvalue()


def png(seed):
    out = io.BytesIO()
    Image.fromarray(((np.arange(64).reshape(8, 8) * 3 + seed) % 256).astype(np.uint8)).save(out, format="PNG")
    return out.getvalue()


def run(args, cwd=None):
    return subprocess.run([KILN] + args, capture_output=True, text=True, cwd=cwd)


class KilnShardToWebDataset(unittest.TestCase):
    def test_webdataset_reads_kiln_shards_with_the_source_bytes(self):
        with tempfile.TemporaryDirectory() as tmp:
            sources = {}
            for c, name in enumerate(["cat", "dog", "eel"]):
                os.makedirs(os.path.join(tmp, "images", name))
                for i in range(7):
                    path = os.path.join(tmp, "images", name, f"{i}.jpg")
                    with open(path, "wb") as f:
                        f.write(jpeg(c * 10 + i))
                    sources[hashlib.sha256(open(path, "rb").read()).hexdigest()] = c
            out = os.path.join(tmp, "shards")
            done = run(["shard", "data=image_folder", f"data.root={tmp}/images", "data.test_root=null",
                        "data.val_fraction=0", "shard.out=" + out, "shard.splits=[train]", "shard.max_count=5",
                        "hydra.run.dir=" + os.path.join(tmp, "run")])
            self.assertEqual(done.returncode, 0, done.stderr)
            index = json.load(open(os.path.join(out, "train.index.json")))
            self.assertEqual(index["samples"], 21)
            self.assertEqual(index["classes"], ["cat", "dog", "eel"])
            self.assertEqual([s["samples"] for s in index["shards"]], [5, 5, 5, 5, 1])
            for shard in index["shards"]:
                path = os.path.join(out, shard["url"])
                self.assertEqual(os.path.getsize(path), shard["bytes"])
                self.assertEqual(hashlib.sha256(open(path, "rb").read()).hexdigest(), shard["sha256"])
            urls = sorted(glob.glob(os.path.join(out, "train-*.tar")))
            self.assertEqual(len(urls), 5)
            seen = {}
            keys = []
            for sample in wds.WebDataset(urls, shardshuffle=False):
                keys.append(sample["__key__"])
                self.assertEqual(set(k for k in sample if not k.startswith("__")), {"jpg", "cls"})
                seen[hashlib.sha256(sample["jpg"]).hexdigest()] = int(sample["cls"])
            self.assertEqual(keys, [f"{i:09d}" for i in range(21)])
            self.assertEqual(seen, sources)  # every file, byte for byte, with its class

    def test_text_corpus_shards_one_document_per_sample(self):
        # text_corpus cuts overlapping blocks from its files: kiln shard writes the files themselves.
        with tempfile.TemporaryDirectory() as tmp:
            texts = {"a.txt": "Call me Ishmael. " * 40, "b.txt": "Some years ago, never mind how long. " * 30}
            for name, text in texts.items():
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(text)
            out = os.path.join(tmp, "shards")
            done = run(["shard", "data=mobydick", f"data.train=[{tmp}/a.txt,{tmp}/b.txt]", "data.val=[]", "data.test=[]",
                        "data.block_size=8", "shard.out=" + out, "shard.splits=[train]",
                        "hydra.run.dir=" + os.path.join(tmp, "run")])
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(json.load(open(os.path.join(out, "train.index.json")))["samples"], 2)
            read = [s["txt"].decode() for s in wds.WebDataset(os.path.join(out, "train-000000.tar"), shardshuffle=False)]
            self.assertEqual(read, [texts["a.txt"], texts["b.txt"]])

    def test_shard_refuses_bad_options_in_one_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            for override, want in [("shard.max_size=12XB", "unknown unit"),
                                   ("shard.splits=[tran]", "shard.splits"),
                                   ("shard.max_count=0", "shard.max_count")]:
                done = run(["shard", "shard.out=" + tmp, override, "hydra.run.dir=" + os.path.join(tmp, "run")])
                self.assertEqual(done.returncode, 2, done.stderr)
                lines = [l for l in done.stderr.splitlines() if "error" in l]
                self.assertEqual(len(lines), 1, done.stderr)
                self.assertIn(want, lines[0])


    def test_sigint_leaves_finished_shards_and_no_partial_one(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "fm")
            proc = subprocess.Popen([KILN, "shard", "experiment=fashion_mnist", "shard.out=" + out, "shard.splits=[train]",
                                     "shard.max_count=500", "hydra.run.dir=" + os.path.join(tmp, "run")],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.time() + 120
            while not glob.glob(os.path.join(out, "train-000001.tar")) and time.time() < deadline:
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 130, err)
            errors = [l for l in err.splitlines() if "error" in l]
            self.assertEqual(len(errors), 1, err)
            self.assertIn("stopped by SIGINT while writing train", errors[0])
            self.assertFalse(os.path.exists(os.path.join(out, "train.index.json")))
            names = os.listdir(out)
            self.assertTrue(names)
            self.assertTrue(all(n.startswith("train-") and n.endswith(".tar") for n in names), names)
            for name in names:  # every shard left is whole: 500 samples, read to its end
                self.assertEqual(sum(1 for _ in wds.WebDataset(os.path.join(out, name), shardshuffle=False)), 500)


class WebDatasetToKiln(unittest.TestCase):
    def test_kiln_trains_on_webdataset_shardwriter_output(self):
        with tempfile.TemporaryDirectory() as tmp:
            pattern = os.path.join(tmp, "wds-%06d.tar")
            with wds.ShardWriter(pattern, maxcount=30, verbose=0) as sink:
                for i in range(90):
                    sink.write({"__key__": f"s{i:05d}", "jpg": jpeg(i, (36, 36)), "cls": str(i % 3).encode()})
            self.assertEqual(len(glob.glob(os.path.join(tmp, "wds-*.tar"))), 3)
            run_dir = os.path.join(tmp, "run")
            transforms = ("{train: [{_target_: random_resized_crop, size: 32}, {_target_: horizontal_flip}, "
                          "{_target_: to_tensor}], eval: [{_target_: resize, height: 32, width: 32}, {_target_: to_tensor}]}")
            done = run(["train", "data=shards", f"data.train_shards='{tmp}/wds-{{000000..000002}}.tar'",
                        f"data.val_shards={tmp}/wds-000000.tar", "data.batch_size=16", "data.transforms=" + transforms,
                        "model=mlp", "model.in_features=3072", "model.hidden=[16]", "model.num_classes=3", "task.num_classes=3",
                        "trainer.max_epochs=1", "trainer.num_threads=1", "test=false", "hydra.run.dir=" + run_dir])
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("counted 90 samples in 3 shards", done.stderr)
            self.assertIn("6 batches per epoch", done.stderr)
            self.assertTrue(os.path.exists(os.path.join(run_dir, "checkpoints", "last.ckpt")))

    def test_two_ranks_train_on_halves_of_the_epoch(self):
        with tempfile.TemporaryDirectory() as tmp:
            with wds.ShardWriter(os.path.join(tmp, "wds-%06d.tar"), maxcount=25, verbose=0) as sink:
                for i in range(100):
                    sink.write({"__key__": f"s{i:05d}", "png": png(i), "cls": str(i % 2).encode()})
            run_dir = os.path.join(tmp, "run")
            done = run(["train", "data=shards", f"data.train_shards={tmp}/wds-*.tar", "data.batch_size=10",
                        "data.grayscale=true", "data.transforms={train: [{_target_: to_tensor}]}",
                        "model=mlp", "model.in_features=64", "model.hidden=[8]", "model.num_classes=2", "task.num_classes=2",
                        "trainer.devices=2", "trainer.max_epochs=1", "trainer.limit_val_batches=0", "callbacks=none",
                        "test=false", "hydra.run.dir=" + run_dir])
            self.assertEqual(done.returncode, 0, done.stderr)
            # 100 samples on 2 ranks: 50 each, 5 batches of 10 per epoch.
            self.assertIn("5 batches per epoch per rank", done.stderr)

    def test_a_truncated_webdataset_shard_is_one_line_naming_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "wds-000000.tar")
            with wds.TarWriter(path) as sink:
                for i in range(20):
                    sink.write({"__key__": f"s{i:05d}", "jpg": jpeg(i), "cls": b"1"})
            blob = open(path, "rb").read()
            open(path, "wb").write(blob[: len(blob) // 2])
            done = run(["train", "data=shards", f"data.train_shards={path}", "model=mlp", "trainer.max_epochs=1",
                        "test=false", "hydra.run.dir=" + os.path.join(tmp, "run")])
            self.assertNotEqual(done.returncode, 0)
            errors = [l for l in done.stderr.splitlines() if "error" in l]
            self.assertEqual(len(errors), 1, done.stderr)
            self.assertIn(path, errors[0])
            self.assertIn("truncated", errors[0])


if __name__ == "__main__":
    unittest.main()
