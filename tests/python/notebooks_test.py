"""Executes docs/examples/notebooks end to end with nbclient and ipykernel (the .venv's), and asserts
on what their cells printed: accuracy above a bound, a wrong prediction drawn, kiln.Predictor and
`kiln predict` agreeing on every test image."""
import os
import re
import sys
import tempfile
import unittest

try:
    import nbclient
    import nbformat
except ImportError:  # scripts/setup_venv.sh test installs them
    nbclient = None

NOTEBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "examples", "notebooks")
FASHION = "/usr/share/datasets/fashion-mnist"


def run(name, work):
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    os.environ["KILN_NOTEBOOK_DIR"] = work
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": work}}).execute()
    text, images = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("name") == "stdout":
                text.append(out["text"])
            if "image/png" in out.get("data", {}):
                images += 1
            if "text/html" in out.get("data", {}):
                text.append("HTML:" + out["data"]["text/html"][:40])
    return "".join(text), images


@unittest.skipUnless(nbclient is not None, "nbclient and ipykernel are not installed (scripts/setup_venv.sh test)")
@unittest.skipUnless(os.path.exists(FASHION + "/t10k-labels-idx1-ubyte.gz"), FASHION + " is not there")
class Notebooks(unittest.TestCase):
    def test_train_and_inspect(self):
        with tempfile.TemporaryDirectory() as work:
            out, images = run("fashion_mnist.ipynb", work)
        accuracy = float(re.search(r"ACCURACY ([\d.]+)", out).group(1))
        self.assertGreater(accuracy, 0.80, out)  # one epoch of the CNN
        validations = int(re.search(r"VALIDATIONS (\d+)", out).group(1))
        self.assertGreaterEqual(validations, 1, out)
        first, last = map(float, re.search(r"LOSS FIRST ([\d.]+) LAST ([\d.]+)", out).groups())
        self.assertLess(last, first, out)
        diagonal, total = map(int, re.search(r"CONFUSION DIAGONAL (\d+) of (\d+)", out).groups())
        self.assertEqual(total, 10000)
        self.assertAlmostEqual(diagonal / total, accuracy, places=3)
        self.assertIn("HTML:<iframe srcdoc=", out)  # the report, inline
        self.assertRegex(out, r"WRONG test image \d+: predicted .+ \(p=[\d.]+\), it is ")
        self.assertEqual(images, 1, out)

    def test_finetune_and_predict(self):
        with tempfile.TemporaryDirectory() as work:
            out, _ = run("finetune_predict.ipynb", work)
        self.assertIn("BASE True", out)
        self.assertGreater(float(re.search(r"TUNED ACCURACY ([\d.]+)", out).group(1)), 0.75, out)
        self.assertIn("AGREE 10000 of 10000", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
