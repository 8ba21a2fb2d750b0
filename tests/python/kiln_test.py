"""`import kiln` (build/python) against the `kiln` command: the same config, the same trained weights,
and kiln's errors as kiln.KilnError. Run by ctest (tests/python/CMakeLists.txt) with the .venv's
Python; torch is imported first, as a notebook would, so kiln shares that process's LibTorch."""
import math
import os
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

import torch  # noqa: F401  (first, as users do)
import kiln

from runs import FASHION, have_fashion, small_run
from runs import weights as _weights

KILN = os.environ["KILN_BINARY"]


def weights(run_dir, out_dir):
    return _weights([KILN], run_dir, out_dir)


class FirstCommand(unittest.TestCase):
    """README's first command builds kiln_runtime; `import kiln` works after it (issue 51)."""

    def test_the_first_commands_target_builds_the_extension(self):
        query = subprocess.run([os.environ["KILN_NINJA"], "-C", os.environ["KILN_BUILD_DIR"], "-t", "query", "kiln_runtime"],
                               check=True, capture_output=True, text=True).stdout
        self.assertIn("python/kiln/_kiln", query)

    def test_without_the_extension_the_import_says_what_to_run(self):
        package = os.path.dirname(kiln.__file__)
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "kiln"))
            for name in os.listdir(package):
                if name.endswith(".py"):
                    with open(os.path.join(package, name), "rb") as src, open(os.path.join(tmp, "kiln", name), "wb") as dst:
                        dst.write(src.read())
            r = subprocess.run([sys.executable, "-c", "import kiln"], capture_output=True, text=True,
                               env=dict(os.environ, PYTHONPATH=tmp))
        self.assertEqual(r.returncode, 1)
        last = r.stderr.strip().splitlines()[-1]
        self.assertTrue(last.startswith("ImportError: kiln's extension kiln._kiln is not built in "), r.stderr)
        self.assertIn("scripts/setup.sh", last)


@unittest.skipUnless(have_fashion(), FASHION + " is not there")
class EvaluateARun(unittest.TestCase):
    def test_run_dir_means_the_runs_config_and_checkpoints(self):
        """kiln.Job(overrides=["run_dir=R"], evaluate=True): R's stored config (not the defaults),
        R's best checkpoint, and exactly the test metrics kiln.fit reported for it."""
        with tempfile.TemporaryDirectory() as tmp:
            fitted = kiln.fit(small_run(tmp + "/run") + ["optimizer.lr=0.003", "trainer.limit_train_batches=10"])  # 3 epochs
            self.assertIn("test/acc", fitted)
            evaluate = kiln.Job(overrides=["run_dir=" + tmp + "/run", "hydra.run.dir=" + tmp + "/eval"], evaluate=True)
            self.assertEqual(evaluate.config["optimizer"]["lr"], 0.003)
            self.assertEqual(evaluate.config["model"]["hidden"], [16])
            best = evaluate.load_checkpoint("best")
            with open(os.path.join(tmp, "run", "checkpoints", "best_model_path.txt")) as f:
                self.assertEqual(os.path.basename(best), os.path.basename(f.read().strip()))
            self.assertEqual(evaluate.test(), fitted)
            self.assertEqual(os.path.dirname(evaluate.load_checkpoint("last")), os.path.join(tmp, "run", "checkpoints"))


class Compose(unittest.TestCase):
    def test_matches_the_command_line(self):
        cfg = kiln.compose(overrides=["model=mlp", "model.hidden=[64,32]", "trainer.max_epochs=2"])
        self.assertEqual(cfg["model"]["_target_"], "mlp")
        self.assertEqual(cfg["model"]["hidden"], [64, 32])
        self.assertEqual(cfg["trainer"]["max_epochs"], 2)
        self.assertIsInstance(cfg["optimizer"]["lr"], float)
        printed = subprocess.run([KILN, "train", "model=mlp", "model.hidden=[64,32]", "trainer.max_epochs=2",
                                  "--cfg", "job", "--resolve"], check=True, capture_output=True, text=True).stdout
        self.assertIn("max_epochs: 2", printed)
        self.assertIn("_target_: mlp", printed)

    def test_instantiate_builds_models_and_data_modules(self):
        cfg = kiln.compose(overrides=["model=mlp", "model.hidden=[32]"])
        model = kiln.instantiate(cfg["model"])
        model.eval()  # no dropout
        self.assertEqual(model.num_parameters, 784 * 32 + 32 + 32 * 10 + 10)
        weights = model.state_dict()
        self.assertEqual(tuple(weights["layers.0.weight"].shape), (32, 784))
        x = torch.randn(4, 1, 28, 28)
        expected = torch.relu(x.flatten(1) @ weights["layers.0.weight"].T + weights["layers.0.bias"]) \
            @ weights["head.weight"].T + weights["head.bias"]
        self.assertTrue(torch.allclose(model(x), expected, atol=1e-5))
        with torch.no_grad():
            weights["head.bias"].fill_(1.0)  # shared storage: the model sees it
        self.assertTrue(torch.equal(model.state_dict()["head.bias"], torch.ones(10)))
        with self.assertRaises(kiln.KilnError):
            model(torch.zeros(2, 5))
        self.assertIsInstance(kiln.instantiate(cfg["data"]), kiln.DataModule)
        with self.assertRaises(kiln.KilnError) as caught:
            kiln.instantiate(cfg["task"])
        self.assertIn("which kiln builds from the config of a job", str(caught.exception))
        with self.assertRaises(kiln.KilnError):
            kiln.instantiate({"_target_": "no_such_thing"})

    def test_a_bad_override_is_a_kiln_error_with_kilns_message(self):
        with self.assertRaises(kiln.KilnError) as caught:
            kiln.compose(overrides=["trainer.max_stepz=3"])
        self.assertIn("max_stepz", str(caught.exception))
        self.assertIn("max_steps", str(caught.exception))  # did you mean
        self.assertTrue(issubclass(kiln.KilnError, ValueError))
        with self.assertRaises(kiln.KilnError):
            kiln.compose(overrides=["model=no_such_model"])
        with self.assertRaises(TypeError) as caught:
            kiln.compose(overrides="model=mlp")
        self.assertIn("not one string", str(caught.exception))
        with self.assertRaises(kiln.KilnError):
            kiln.compose(config_dir="/no/such/folder")


class InstantiateComponents(unittest.TestCase):
    """kiln.instantiate for the kinds a Python loop uses on its own, each against torch's own."""

    def test_an_optimizer_trains_a_python_model_as_torch_adamw_does(self):
        torch.manual_seed(0)
        model = torch.nn.Linear(5, 3)
        reference = torch.nn.Linear(5, 3)
        reference.load_state_dict(model.state_dict())
        opt = kiln.instantiate({"_target_": "adamw", "lr": 0.01, "weight_decay": 0.01,
                                "no_decay_norm_and_bias": False}, params=model.named_parameters())
        ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.01, weight_decay=0.01)
        x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
        for _ in range(5):
            for m, o in ((model, opt), (reference, ref_opt)):
                o.zero_grad()
                torch.nn.functional.cross_entropy(m(x), y).backward()
                o.step()
        self.assertFalse(torch.equal(model.weight, reference.weight.new_zeros(3, 5)))
        for a, b in zip(model.parameters(), reference.parameters()):
            self.assertTrue(torch.allclose(a, b, atol=1e-6), (a, b))
        self.assertEqual(opt.lr, [0.01])
        # configs/optimizer/adamw.yaml keeps norms and biases out of weight decay: two groups.
        two = kiln.instantiate(kiln.compose(overrides=["optimizer=adamw"])["optimizer"], params=model.named_parameters())
        self.assertEqual(two.lr, [0.001, 0.001])

    def test_a_schedule_warms_up_then_decays(self):
        model = torch.nn.Linear(2, 2)
        opt = kiln.instantiate({"_target_": "sgd", "lr": 0.1}, params=model.parameters())
        sched = kiln.instantiate({"_target_": "cosine_with_warmup", "warmup_steps": 2}, optimizer=opt, total_steps=6)
        self.assertEqual(sched.interval, "step")
        lrs = []
        for _ in range(6):
            lrs.append(opt.lr[0])
            opt.step()
            sched.step()
        self.assertAlmostEqual(lrs[0], 0.0)
        self.assertAlmostEqual(lrs[1], 0.05)
        self.assertAlmostEqual(lrs[2], 0.1)
        self.assertAlmostEqual(lrs[4], 0.1 * 0.5 * (1 + math.cos(math.pi * 2 / 4)))
        self.assertTrue(all(a > b for a, b in zip(lrs[2:], lrs[3:])), lrs)

    def test_loss_metric_transform_tokenizer_and_features(self):
        logits = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0], [1.0, 2.0, 0.0], [0.0, 0.0, 1.0]], requires_grad=True)
        target = torch.tensor([0, 2, 0, 2])
        loss = kiln.instantiate({"_target_": "cross_entropy", "label_smoothing": 0.1})(logits, target)
        expected = torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1)
        self.assertTrue(torch.allclose(loss, expected))
        loss.backward()
        self.assertEqual(tuple(logits.grad.shape), (4, 3))  # autograd went through kiln's loss

        acc = kiln.instantiate({"_target_": "accuracy"}, num_classes=3)
        acc.update(logits, target)
        acc.update(torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([1]))
        self.assertEqual(acc.compute(), 0.8)  # 4 of 5 rows
        acc.reset()
        acc.update(torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([0]))
        self.assertEqual(acc.compute(), 0.0)
        per_class = kiln.instantiate({"_target_": "accuracy", "average": "none"}, num_classes=3)
        per_class.update(logits, target)
        self.assertEqual(per_class.compute(), {"0": 0.5, "2": 1.0})  # class 1 has no rows

        image = torch.arange(2 * 3 * 4, dtype=torch.uint8).reshape(2, 3, 4)
        flip = kiln.instantiate({"_target_": "horizontal_flip", "p": 1.0})
        self.assertTrue(torch.equal(flip(image), image.flip(-1)))
        crop = kiln.instantiate({"_target_": "random_crop", "size": 3, "padding": 2})
        self.assertTrue(torch.equal(crop(image, seed=7, index=3), crop(image, seed=7, index=3)))
        self.assertEqual(len({crop(image, seed=7, index=i).flatten().tolist().__str__() for i in range(12)}) > 1, True)
        self.assertFalse(crop.deterministic)

        tok = kiln.instantiate({"_target_": "char"})
        tok.fit(["call me ishmael", "some years ago"])
        ids = tok.encode("me ago")
        self.assertEqual(tok.decode(ids), "me ago")
        self.assertEqual(tok.vocab_size, 256)  # the id space, as configured
        self.assertEqual(tok.encode("z"), [1])  # never seen: <unk>

        mel = kiln.instantiate({"_target_": "log_mel", "n_mels": 40})
        wave = torch.sin(torch.arange(16000, dtype=torch.float32) * 2 * math.pi * 440 / 16000)
        features = mel(wave)
        self.assertEqual(tuple(features.shape), (mel.num_frames(16000), 40))
        self.assertEqual(mel.num_features, 40)

    def test_what_cannot_be_built_alone_says_so(self):
        with self.assertRaisesRegex(kiln.KilnError, "needs params="):
            kiln.instantiate({"_target_": "adamw"})
        with self.assertRaisesRegex(kiln.KilnError, "needs optimizer="):
            kiln.instantiate({"_target_": "cosine_with_warmup"})
        with self.assertRaisesRegex(kiln.KilnError, "'image_classification' is a task, which kiln builds from the "
                                                    "config of a job"):
            kiln.instantiate({"_target_": "image_classification"})
        with self.assertRaisesRegex(kiln.KilnError, "monitor"):  # a required option
            kiln.instantiate({"_target_": "early_stopping"})
        with self.assertRaisesRegex(kiln.KilnError, "no component 'adamww'"):
            kiln.instantiate({"_target_": "adamww"})
        with self.assertRaisesRegex(kiln.KilnError, "cannot take these tensors"):
            kiln.instantiate({"_target_": "cross_entropy"})(torch.zeros(2, 3), torch.zeros(5, dtype=torch.long))
        with self.assertRaisesRegex(kiln.KilnError, "params holds a str"):
            kiln.instantiate({"_target_": "sgd", "lr": 0.1}, params=["weight"])
        with self.assertRaisesRegex(kiln.KilnError, "params holds a pair whose second item is a str, not a tensor"):
            kiln.instantiate({"_target_": "sgd", "lr": 0.1}, params=[("weight", "w")])
        for target in ("char", "whitespace", "sentencepiece"):  # an unfitted SentencePiece crashed
            tok = kiln.instantiate({"_target_": target, "vocab_size": 40})
            with self.assertRaisesRegex(kiln.KilnError, "Tokenizer.encode: the tokenizer is not fitted yet"):
                tok.encode("abc")
            with self.assertRaisesRegex(kiln.KilnError, "Tokenizer.decode: the tokenizer is not fitted yet"):
                tok.decode([5, 6])
        mlp = kiln.instantiate({"_target_": "mlp", "in_features": 4, "hidden": [4], "num_classes": 2})
        with self.assertRaisesRegex(kiln.KilnError, "the model cannot take this input: mat1 and mat2 shapes"):
            mlp(torch.zeros(2, 5))


@unittest.skipUnless(have_fashion(), FASHION + " is not there")
class Fit(unittest.TestCase):
    def test_fit_and_kiln_train_give_bitwise_equal_weights(self):
        with tempfile.TemporaryDirectory() as tmp:
            metrics = kiln.fit(small_run(tmp + "/py"))
            self.assertGreater(metrics["test/acc"], 0.3)
            subprocess.run([KILN, "train"] + small_run(tmp + "/cli"), check=True, capture_output=True)
            with open(tmp + "/py/test_metrics.yaml") as a, open(tmp + "/cli/test_metrics.yaml") as b:
                self.assertEqual(a.read(), b.read())
            self.assertEqual(weights(tmp + "/py", tmp + "/py_export"), weights(tmp + "/cli", tmp + "/cli_export"))

    def test_metrics_and_runs_read_back(self):
        with tempfile.TemporaryDirectory() as tmp:
            trainer = kiln.Job(overrides=small_run(tmp + "/run") + ["trainer.log_every_n_steps=10",
                                                                         "trainer.val_check_interval=15"])
            trainer.fit()
            rows = trainer.metrics()
            self.assertEqual([r["step"] for r in rows if "train/loss" in r], [10, 20, 30])
            self.assertEqual(len([r for r in rows if "val/acc" in r]), 2)
            test = trainer.test()
            run = kiln.read_run(tmp + "/run")
            self.assertEqual(run["config"]["model"]["_target_"], "mlp")
            self.assertEqual(run["test"]["test/acc"], test["test/acc"])
            self.assertEqual(run["metrics"][:len(rows)], rows)  # then the test's row
            self.assertEqual(run["metrics"][-1]["test/acc"], test["test/acc"])
            with self.assertRaises(kiln.KilnError):
                kiln.read_run(tmp)
            page = kiln.report(tmp + "/run")
            self.assertIn("<iframe srcdoc=", page._repr_html_())
            self.assertIn('"val/acc"', page.html)  # the run's curves are in the page's data
            self.assertEqual(page.save(tmp + "/page.html"), tmp + "/page.html")
            with self.assertRaises(kiln.KilnError):
                kiln.report(tmp + "/nowhere")

    def test_progress_bar_draws_epochs(self):
        import io
        import contextlib
        err = io.StringIO()
        with tempfile.TemporaryDirectory() as tmp:
            with contextlib.redirect_stderr(err):
                kiln.fit(small_run(tmp + "/run") + ["test=false"], progress=True)
            with open(tmp + "/run/train.log") as f:  # the run's log file, as `kiln train` writes it
                logged = [line for line in f.read().splitlines() if "][kiln][" in line]
        self.assertIn("epoch 0", err.getvalue())
        self.assertIn("30/422", err.getvalue())  # 30 steps of an epoch of 422 batches
        # kiln's own log lines reach Python's sys.stderr (which a notebook shows), with the run's.
        self.assertRegex(err.getvalue(), r"\]\[kiln\]\[INFO\] - fit done: ")
        self.assertTrue(any("fit done: " in line for line in logged), logged)
        for line in logged:
            self.assertIn(line, err.getvalue())

    def test_instantiated_callbacks_and_loggers_join_the_job(self):
        import json
        with tempfile.TemporaryDirectory() as tmp:
            stop = kiln.instantiate({"_target_": "early_stopping", "monitor": "val/loss", "patience": 1,
                                     "min_delta": 100.0})  # nothing counts as better after the first
            extra = kiln.instantiate({"_target_": "jsonl", "save_dir": tmp + "/extra"})
            self.assertEqual(repr(stop), "<kiln callback early_stopping>")
            kiln.fit(small_run(tmp + "/run") + ["test=false", "trainer.limit_train_batches=10"],  # epochs of 10 steps
                     callbacks=[stop], loggers=[extra])
            with open(tmp + "/extra/metrics.jsonl") as f:
                rows = [json.loads(line) for line in f]
            self.assertEqual([r["step"] for r in rows if "val/loss" in r], [10, 20])  # stopped at the second
            with open(tmp + "/run/train.log") as f:
                self.assertIn("20 optimizer steps", f.read())
            with self.assertRaises(TypeError):
                kiln.fit(small_run(tmp + "/run2"), loggers=[stop])
            # Validating within an epoch (val_check_interval), early stopping ends training right after
            # the validation that decides it, as Lightning's should_stop does: 20 steps, not the epoch's 422.
            stop = kiln.instantiate({"_target_": "early_stopping", "monitor": "val/loss", "patience": 1,
                                     "min_delta": 100.0})
            mid = kiln.instantiate({"_target_": "jsonl", "save_dir": tmp + "/mid"})
            kiln.fit(small_run(tmp + "/run3") + ["test=false", "trainer.max_steps=60", "trainer.val_check_interval=10"],
                     callbacks=[stop], loggers=[mid])
            with open(tmp + "/mid/metrics.jsonl") as f:
                rows = [json.loads(line) for line in f]
            self.assertEqual([r["step"] for r in rows if "val/loss" in r], [10, 20])
            with open(tmp + "/run3/train.log") as f:
                self.assertIn("20 optimizer steps", f.read())

    def test_a_training_job_locks_its_run_directory(self):
        import gc
        with tempfile.TemporaryDirectory() as tmp:
            first = kiln.Job(overrides=small_run(tmp + "/run"))
            with self.assertRaisesRegex(kiln.KilnError, r"is in use: another kiln process \(pid %d\) holds its lock"
                                        % os.getpid()):
                kiln.Job(overrides=small_run(tmp + "/run"))
            cli = subprocess.run([KILN, "train"] + small_run(tmp + "/run"), capture_output=True, text=True)
            self.assertEqual(cli.returncode, 2, cli.stderr)
            self.assertIn("is in use", cli.stderr)
            evaluating = kiln.Job(overrides=small_run(tmp + "/run"), evaluate=True)  # reads only: no lock
            del first, evaluating
            gc.collect()
            again = kiln.Job(overrides=small_run(tmp + "/run"))  # released with the job
            # A job built from a dict (kiln.Job(cfg)) locks its folder too, before it writes there.
            cfg = kiln.compose(overrides=small_run(tmp + "/run"))
            with self.assertRaisesRegex(kiln.KilnError, r"is in use: another kiln process \(pid %d\) holds its lock"
                                        % os.getpid()):
                kiln.Job(cfg)
            del again
            gc.collect()
            from_dict = kiln.Job(cfg)
            cli = subprocess.run([KILN, "train"] + small_run(tmp + "/run"), capture_output=True, text=True)
            self.assertEqual(cli.returncode, 2, cli.stderr)
            del from_dict

    def test_trainer_from_a_composed_dict_and_the_gil_is_released(self):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = kiln.compose(overrides=small_run(tmp + "/run") + ["test=false"])
            cfg["trainer"]["max_steps"] = 10
            trainer = kiln.Job(cfg)
            self.assertEqual(trainer.output_dir, tmp + "/run")
            ticks = []
            stop = threading.Event()

            def tick():  # runs only while kiln has let go of the GIL
                while not stop.is_set():
                    ticks.append(1)
                    stop.wait(0.001)

            ticker = threading.Thread(target=tick)
            ticker.start()
            trainer.fit()
            stop.set()
            ticker.join()
            self.assertGreater(len(ticks), 5)
            self.assertTrue(os.path.exists(tmp + "/run/checkpoints/last.ckpt"))
            self.assertGreater(trainer.validate()["val/acc"], 0.0)

    def test_bad_input_raises_kiln_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(kiln.KilnError):
                kiln.fit(["trainer.max_epochs=-1", "hydra.run.dir=" + tmp + "/bad"])
            evaluate = kiln.Job(overrides=["model=mlp", "hydra.run.dir=" + tmp + "/eval"], evaluate=True)
            with self.assertRaises(kiln.KilnError) as caught:
                evaluate.load_checkpoint(tmp + "/missing.ckpt")
            self.assertIn("missing.ckpt", str(caught.exception))
            with self.assertRaises(kiln.KilnError):
                kiln.Job({"trainer": {"max_steps": object()}}, output_dir=tmp + "/x")


@unittest.skipUnless(have_fashion(), FASHION + " is not there")
class Callbacks(unittest.TestCase):
    def test_hooks_are_called_from_kilns_loop(self):
        class Record(kiln.Callback):
            def __init__(self):
                self.steps, self.validations, self.tests = [], [], []

            def on_train_batch_end(self, trainer, loss):
                self.steps.append((trainer.global_step, loss))

            def on_validation_end(self, trainer, metrics):
                self.validations.append(dict(metrics))

            def on_test_end(self, trainer, metrics):
                self.tests.append(dict(metrics))

        record = Record()
        with tempfile.TemporaryDirectory() as tmp:
            metrics = kiln.fit(small_run(tmp + "/run") + ["trainer.val_check_interval=10"], callbacks=[record])
        self.assertEqual([s for s, _ in record.steps], list(range(1, 31)))
        self.assertTrue(all(loss > 0 for _, loss in record.steps))
        self.assertEqual(len(record.validations), 3)
        self.assertIn("val/acc", record.validations[-1])
        self.assertEqual(record.tests, [{k: v for k, v in metrics.items() if k in record.tests[0]}])

    def test_a_callback_can_stop_the_fit(self):
        class StopAtFive(kiln.Callback):
            def on_train_batch_end(self, trainer, loss):
                if trainer.global_step == 5:
                    trainer.request_stop("enough")

            def on_fit_end(self, trainer):
                self.ended_at = trainer.global_step

        stop = StopAtFive()
        with tempfile.TemporaryDirectory() as tmp:
            job = kiln.Job(overrides=small_run(tmp + "/run"), callbacks=[stop])
            job.fit()
            self.assertTrue(os.path.exists(tmp + "/run/checkpoints/last.ckpt"))
        self.assertEqual(stop.ended_at, 5)

    def test_a_callbacks_trainer_is_a_kiln_trainer_and_the_old_constructor_makes_a_job(self):
        # One name per unit, as in C++: kiln.Job is kiln::Job, kiln.Trainer is the loop (kiln::Trainer)
        # a callback gets. kiln.Trainer(overrides=...) was the job until 0.1.0: it still makes one.
        class Seen(kiln.Callback):
            def on_fit_start(self, trainer):
                self.trainer_type = type(trainer)
                self.is_trainer = isinstance(trainer, kiln.Trainer)
                self.is_loop_state = isinstance(trainer, kiln.LoopState)

        seen = Seen()
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertWarns(DeprecationWarning) as warned:
                overrides = [o for o in small_run(tmp + "/run") if not o.startswith("trainer.max_steps=")]
                job = kiln.Trainer(overrides=overrides + ["trainer.max_steps=2"], callbacks=[seen])
            self.assertIn("kiln.Job", str(warned.warning))
            self.assertIsInstance(job, kiln.Job)
            job.fit()
        self.assertTrue(seen.is_trainer)
        self.assertTrue(seen.is_loop_state)
        self.assertEqual(seen.trainer_type.__name__, "Trainer")
        self.assertNotIsInstance(job, kiln.Trainer)

    def test_an_exception_stops_the_run_and_surfaces_with_its_traceback(self):
        class Broken(kiln.Callback):
            def on_train_batch_end(self, trainer, loss):
                if trainer.global_step == 3:
                    raise RuntimeError("broken at step 3")

        raised = None
        with tempfile.TemporaryDirectory() as tmp:
            try:  # not assertRaises, which drops the traceback
                kiln.fit(small_run(tmp + "/run"), callbacks=[Broken()])
            except RuntimeError as e:
                raised = e
        self.assertIsNotNone(raised)
        self.assertEqual(str(raised), "broken at step 3")
        frames = []
        tb = raised.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        self.assertIn("on_train_batch_end", frames)
        with self.assertRaises(TypeError):
            kiln.Job(overrides=["model=mlp"], callbacks=[object()])


@unittest.skipUnless(have_fashion(), FASHION + " is not there")
class Data(unittest.TestCase):
    def cfg(self):
        cfg = kiln.compose(overrides=["data=fashion_mnist", "data.num_workers=2", "data.batch_size=64"])["data"]
        cfg["transforms"]["train"].insert(1, {"_target_": "random_crop", "size": 28, "padding": 2})
        return cfg

    def test_loaders_give_torch_tensors_with_kilns_seeded_randomness(self):
        first = kiln.data_module(self.cfg(), seed=5)
        loader = first.train_loader()
        self.assertEqual(len(loader), 844)  # 54000 training images (val_fraction 0.1) in batches of 64
        epoch0 = next(iter(loader))
        self.assertIsInstance(epoch0["input"], torch.Tensor)
        self.assertEqual(tuple(epoch0["input"].shape), (64, 1, 28, 28))
        self.assertEqual(epoch0["input"].dtype, torch.float32)
        self.assertEqual(epoch0["target"].dtype, torch.int64)
        epoch1 = next(iter(loader))  # a second pass is the next epoch: another order
        self.assertFalse(torch.equal(epoch0["target"], epoch1["target"]))
        again = next(iter(kiln.data_module(self.cfg(), seed=5).train_loader()))
        self.assertTrue(torch.equal(epoch0["input"], again["input"]))  # same seed, same batch, bitwise
        self.assertTrue(torch.equal(epoch0["target"], again["target"]))
        other = next(iter(kiln.data_module(self.cfg(), seed=6).train_loader()))
        self.assertFalse(torch.equal(epoch0["target"], other["target"]))
        test = first.test_loader()
        self.assertEqual(sum(b["target"].shape[0] for b in test), 10000)
        self.assertEqual(first.class_names[0], "T-shirt/top")

    def test_a_plain_pytorch_loop_trains_on_it(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for i, batch in enumerate(kiln.data_module(self.cfg(), seed=1).train_loader()):
            loss = torch.nn.functional.cross_entropy(model(batch["input"]), batch["target"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if i == 100:
                break  # dropping the iterator stops kiln's loader
        self.assertLess(sum(losses[-10:]) / 10, sum(losses[:10]) / 10)

    def test_lightning_trains_on_it(self):
        import kiln.lightning
        import pytorch_lightning as pl

        class Linear(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(784, 10)
                self.losses = []

            def training_step(self, batch, index):
                loss = torch.nn.functional.cross_entropy(self.layer(batch["input"].flatten(1)), batch["target"])
                self.losses.append(loss.item())
                return loss

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        torch.manual_seed(0)
        model = Linear()
        data = kiln.lightning.DataModule(self.cfg(), seed=1)
        with tempfile.TemporaryDirectory() as tmp:
            trainer = pl.Trainer(max_steps=60, accelerator="cpu", logger=False, enable_checkpointing=False,
                                 enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                                 default_root_dir=tmp)
            trainer.fit(model, datamodule=data)
        self.assertEqual(trainer.global_step, 60)
        self.assertLess(sum(model.losses[-10:]) / 10, sum(model.losses[:10]) / 10)

    def test_bad_data_config_is_a_kiln_error(self):
        cfg = self.cfg()
        cfg["batch_size"] = 0
        with self.assertRaises(kiln.KilnError) as caught:
            kiln.data_module(cfg)
        self.assertIn("batch_size", str(caught.exception))
        cfg = self.cfg()
        cfg["root"] = "/nonexistent"
        with self.assertRaises(kiln.KilnError) as caught:
            kiln.data_module(cfg).train_loader()
        self.assertIn("/nonexistent", str(caught.exception))


@unittest.skipUnless(have_fashion(), FASHION + " is not there")
class Predict(unittest.TestCase):
    def test_predictor_answers_as_kiln_predict_does(self):
        import json
        with tempfile.TemporaryDirectory() as tmp:
            trainer = kiln.Job(overrides=small_run(tmp + "/run") + ["test=false"])
            trainer.fit()
            from_trainer = trainer.predict()
            subprocess.run([KILN, "predict", "run_dir=" + tmp + "/run", "+prediction_writer=jsonl",
                            "hydra.run.dir=" + tmp + "/predict"], check=True, capture_output=True)
            with open(tmp + "/predict/predictions.jsonl") as f:
                cli = [json.loads(line) for line in f]
            predictor = kiln.Predictor(tmp + "/run")
            split = predictor.predict_split()
            self.assertEqual(len(split), len(cli))
            self.assertEqual([p["class_index"] for p in split], [r["class_index"] for r in cli])
            self.assertEqual([p["class_index"] for p in from_trainer], [r["class_index"] for r in cli])
            # The same first images as prepared tensors, from kiln's own test loader.
            cfg = kiln.compose(overrides=["model=mlp"])["data"]
            batch = next(iter(kiln.data_module(cfg).test_loader()))
            answers = predictor.predict(batch["input"][:8])
            self.assertEqual([a["class_index"] for a in answers], [r["class_index"] for r in cli[:8]])
            self.assertAlmostEqual(sum(answers[0]["probabilities"]), 1.0, places=5)
            self.assertEqual(predictor.class_names[0], "T-shirt/top")
            # Bad input: an exception with kiln's message, never a crash.
            with self.assertRaises(kiln.KilnError) as caught:
                predictor.predict(torch.zeros(2, 3, 5, 5))
            self.assertIn("input 0", str(caught.exception))
            with self.assertRaises(kiln.KilnError):
                predictor.predict(torch.zeros(2, 1, 28, 28, dtype=torch.int64))
            with self.assertRaises(kiln.KilnError):
                predictor.predict(b"not an image")
            with self.assertRaises(kiln.KilnError):
                predictor.predict(3)
            with self.assertRaises(kiln.KilnError):
                kiln.Predictor(tmp + "/nowhere")


class Generate(unittest.TestCase):
    def test_a_language_model_generates_as_kiln_predict_does(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(tmp + "/book")
            with open(tmp + "/book/train.txt", "w") as f:
                f.write("Call me Ishmael. Some years ago, never mind how long.\n" * 60)
            with open(tmp + "/book/val.txt", "w") as f:
                f.write("Call me Ishmael. Some years ago.\n")
            lm = ["experiment=mobydick_gpt", f"data.train=[{tmp}/book/train.txt]",
                  f"data.val=[{tmp}/book/val.txt]", f"data.test=[{tmp}/book/val.txt]",
                  "data.block_size=16", "data.batch_size=8", "model.dim=16", "model.depth=1",
                  "model.heads=2", "model.mlp_dim=32", "trainer.num_threads=1"]
            subprocess.run([KILN, "train", *lm, "trainer.max_steps=40", "test=false",
                            "hydra.run.dir=" + tmp + "/run"], check=True, capture_output=True)
            cli = subprocess.run([KILN, "predict", *lm, f"ckpt_path={tmp}/run/checkpoints/last.ckpt",
                                  "task.prompt=Call me", "task.max_tokens=12", "task.temperature=0",
                                  "hydra.run.dir=" + tmp + "/predict"],
                                 check=True, capture_output=True, text=True).stdout
            predictor = kiln.Predictor(tmp + "/run")
            self.assertTrue(predictor.generates)
            text = predictor.generate("Call me", max_new_tokens=12, temperature=0)
            self.assertEqual(text + "\n", cli)
            # Several prompts together: a list back, in order; sampling with a seed repeats.
            both = predictor.generate(["Call me", "Some years"], max_new_tokens=6, temperature=0.9,
                                      top_k=5, seed=3)
            self.assertEqual(len(both), 2)
            self.assertTrue(both[0].startswith("Call me") and both[1].startswith("Some years"))
            self.assertEqual(predictor.generate(["Call me", "Some years"], max_new_tokens=6,
                                                temperature=0.9, top_k=5, seed=3), both)
            stop = text[8]
            self.assertEqual(predictor.generate("Call me", max_new_tokens=12, temperature=0, stop=[stop]),
                             text[:text.index(stop, 7)])
            with self.assertRaises(kiln.KilnError) as caught:
                predictor.generate("Call me", top_p=1.5)
            self.assertIn("top_p", str(caught.exception))
            with self.assertRaises(ValueError):
                predictor.generate(max_new_tokens=3)


class PythonMlp(torch.nn.Module):
    """kiln's mlp (hidden [16]) written in Python: the same parameter names."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(784, 16)])
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


@unittest.skipUnless(have_fashion(), FASHION + " is not there")
class OwnModel(unittest.TestCase):
    def test_a_python_module_trains_in_kilns_loop_and_predicts(self):
        torch.manual_seed(0)
        model = PythonMlp()
        before = model.head.weight.detach().clone()
        with tempfile.TemporaryDirectory() as tmp:
            metrics = kiln.fit(small_run(tmp + "/run"), model=model)
            self.assertGreater(metrics["test/acc"], 0.3)
            self.assertTrue(torch.equal(model.head.weight, before))  # kiln trained its scripted copy
            run = kiln.read_run(tmp + "/run")
            self.assertEqual(run["config"]["model"]["_target_"], "torchscript")
            # Exported weights carry the module's own (PyTorch's) names.
            subprocess.run([KILN, "export", "run_dir=" + tmp + "/run", "ckpt_path=last",
                            "hydra.run.dir=" + tmp + "/export"], check=True, capture_output=True)
            with open(tmp + "/export/model.safetensors", "rb") as f:
                header = f.read(8 + struct.unpack("<Q", f.read(8))[0]).decode("utf-8", "replace")
            for name in ("layers.0.weight", "layers.0.bias", "head.weight", "head.bias"):
                self.assertIn('"%s"' % name, header)
            answers = kiln.Predictor(tmp + "/run").predict_split()
            self.assertEqual(len(answers), 10000)
        class WrongShape(torch.nn.Module):  # 100 inputs for 784 pixels: its forward fails
            def __init__(self):
                super().__init__()
                self.head = torch.nn.Linear(100, 10)

            def forward(self, x):
                return self.head(x.flatten(1))

        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(kiln.KilnError) as caught:
                kiln.fit(small_run(tmp + "/run"), model=WrongShape())
        message = str(caught.exception)
        self.assertIn("shapes cannot be multiplied", message)
        self.assertNotIn("\n", message)
        with self.assertRaises(kiln.KilnError):
            class Untypable(torch.nn.Module):
                def forward(self, x):
                    return x.numpy()
            kiln.fit(["model=mlp"], model=Untypable())


@unittest.skipUnless(have_fashion(), FASHION + " is not there")
class Interrupt(unittest.TestCase):
    def test_ctrl_c_is_a_keyboard_interrupt_with_a_resumable_checkpoint(self):
        with tempfile.TemporaryDirectory() as tmp:
            script = ("import kiln, sys\n"
                      "class Started(kiln.Callback):\n"
                      "    def on_train_batch_end(self, trainer, loss):\n"
                      "        if trainer.global_step == 20: print('training', flush=True)\n"
                      "try:\n"
                      "    kiln.fit(%r, callbacks=[Started()])\n"
                      "except KeyboardInterrupt as e:\n"
                      "    print('KeyboardInterrupt:', e, flush=True)\n"
                      "    sys.exit(7)\n" % (small_run(tmp + "/run")[:2] + ["trainer.max_steps=100000", "seed=3",
                                                                          "hydra.run.dir=" + tmp + "/run"]))
            child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=dict(os.environ))
            self.assertEqual(child.stdout.readline().strip(), "training")
            child.send_signal(2)  # SIGINT
            out, err = child.communicate(timeout=120)
            self.assertEqual(child.returncode, 7, err)
            self.assertIn("KeyboardInterrupt: interrupted by SIGINT", out)
            self.assertIn("resume with ckpt_path=" + tmp + "/run/checkpoints/last.ckpt", out)
            self.assertTrue(os.path.exists(tmp + "/run/checkpoints/last.ckpt"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
