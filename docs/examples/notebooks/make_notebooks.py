"""Writes the example notebooks (run it after editing a cell here; the .ipynb files are committed
without outputs). tests/python/notebooks_test.py executes them end to end.
    .venv/bin/python docs/examples/notebooks/make_notebooks.py"""
import os

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = os.path.dirname(os.path.abspath(__file__))

SETUP = """import os, subprocess, tempfile
import torch
import kiln
# Where the runs go (a notebook of your own would use outputs/); kiln's command, for comparing.
work = os.environ.get("KILN_NOTEBOOK_DIR") or tempfile.mkdtemp(prefix="kiln-notebook-")
KILN = os.environ.get("KILN_BINARY", "build/bin/kiln")
print(kiln.__version__, torch.__version__)"""

train = new_notebook(cells=[
    new_markdown_cell("# Train Fashion-MNIST with kiln, then look at the run\n\n"
                      "kiln's `fashion_mnist` experiment (a small CNN), one epoch here; "
                      "`kiln train experiment=fashion_mnist` is the same job on the command line."),
    new_code_cell(SETUP),
    new_code_cell('run_dir = os.path.join(work, "fashion")\n'
                  'metrics = kiln.fit(["experiment=fashion_mnist", "trainer.max_epochs=1", "hydra.run.dir=" + run_dir],\n'
                  '                   progress=True)\n'
                  'print("ACCURACY %.4f" % metrics["test/acc"])'),
    new_markdown_cell("## Curves\n\nWhat the csv logger wrote, as a list of dicts "
                      "(`as_frame=True` gives a pandas DataFrame when pandas is installed)."),
    new_code_cell('run = kiln.read_run(run_dir)\n'
                  'val = [(r["step"], round(r["val/acc"], 4)) for r in run["metrics"] if "val/acc" in r]\n'
                  'train_loss = [(r["step"], round(r["train/loss"], 4)) for r in run["metrics"] if "train/loss" in r]\n'
                  'print("VALIDATIONS", len(val), val)\n'
                  'print("LOSS FIRST %.4f LAST %.4f" % (train_loss[0][1], train_loss[-1][1]))'),
    new_markdown_cell("## The report, inline\n\n`kiln report`'s page: curves, the confusion matrix, per-class accuracy."),
    new_code_cell("kiln.report(run_dir)"),
    new_markdown_cell("## The confusion matrix"),
    new_code_cell('with open(os.path.join(run_dir, "test_confusion_matrix.csv")) as f:\n'
                  '    rows = [line.rstrip("\\n").split(",") for line in f]\n'
                  'diagonal = sum(int(rows[i + 1][i + 1]) for i in range(10))\n'
                  'print("CONFUSION DIAGONAL", diagonal, "of", sum(int(c) for r in rows[1:] for c in r[1:]))'),
    new_markdown_cell("## A wrong prediction\n\nThe trained model (`kiln.Predictor`) on the test images, "
                      "fed as tensors from kiln's own test loader; the first one it gets wrong, drawn."),
    new_code_cell('from PIL import Image\n'
                  'predictor = kiln.Predictor(run_dir)\n'
                  'data = kiln.data_module(kiln.compose(overrides=["experiment=fashion_mnist"])["data"])\n'
                  'batch = next(iter(data.test_loader()))\n'
                  'answers = predictor.predict(batch["input"])\n'
                  'wrong = next(i for i, a in enumerate(answers) if a["class_index"] != int(batch["target"][i]))\n'
                  'pixels = (batch["input"][wrong, 0] * 0.3530 + 0.2860).clamp(0, 1)\n'
                  'display(Image.fromarray((pixels * 255).byte().numpy()).resize((112, 112)))\n'
                  'print("WRONG test image %d: predicted %s (p=%.2f), it is %s" % (wrong, answers[wrong]["class"],\n'
                  '      answers[wrong]["probability"], data.class_names[int(batch["target"][wrong])]))'),
])

finetune = new_notebook(cells=[
    new_markdown_cell("# Fine-tune from a checkpoint, then predict\n\n"
                      "Train a small MLP, start a second run from its weights (`model.init_from`) with a lower "
                      "learning rate, and predict with the result, as `kiln predict` does."),
    new_code_cell(SETUP),
    new_code_cell('base = os.path.join(work, "base")\n'
                  'kiln.fit(["model=mlp", "model.hidden=[64]", "trainer.max_steps=300", "test=false", "seed=1",\n'
                  '          "hydra.run.dir=" + base])\n'
                  'print("BASE", os.path.exists(os.path.join(base, "checkpoints", "last.ckpt")))'),
    new_code_cell('tuned = os.path.join(work, "tuned")\n'
                  'metrics = kiln.fit(["model=mlp", "model.hidden=[64]", "trainer.max_steps=200", "optimizer.lr=0.0005",\n'
                  '                    "+model.init_from=" + os.path.join(base, "checkpoints", "last.ckpt"), "seed=2",\n'
                  '                    "hydra.run.dir=" + tuned])\n'
                  'print("TUNED ACCURACY %.4f" % metrics["test/acc"])'),
    new_markdown_cell("## Predict\n\nThe fine-tuned model answers the test set; `kiln predict` on the same run "
                      "must agree on every image."),
    new_code_cell('import json\n'
                  'answers = kiln.Predictor(tuned).predict_split()\n'
                  'subprocess.run([KILN, "predict", "run_dir=" + tuned, "+prediction_writer=jsonl",\n'
                  '                "hydra.run.dir=" + os.path.join(work, "predict")], check=True, capture_output=True)\n'
                  'with open(os.path.join(work, "predict", "predictions.jsonl")) as f:\n'
                  '    cli = [json.loads(line) for line in f]\n'
                  'same = sum(a["class_index"] == c["class_index"] for a, c in zip(answers, cli))\n'
                  'print("AGREE %d of %d" % (same, len(cli)))\n'
                  'print("FIRST", answers[0]["class"], round(answers[0]["probability"], 4))'),
])

for name, nb in (("fashion_mnist.ipynb", train), ("finetune_predict.ipynb", finetune)):
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, os.path.join(HERE, name))
    print("wrote", name)
