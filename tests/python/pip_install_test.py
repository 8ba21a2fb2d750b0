"""`pip install .`: the wheel that scikit-build-core builds from this checkout (pyproject.toml), installed
into a fresh virtual environment that sees this environment's torch and nothing of the build tree.
From a folder outside the checkout, `import kiln` and the `kiln` command the wheel puts on PATH find
the package's own configs and libraries, and train the same weights, bitwise. Run by ctest with the
.venv's Python (which has scikit-build-core: scripts/python/test.txt); the wheel's CMake build is kept
in build-WHEEL_TAG/ between runs, where ccache finds build/'s compiles."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import torch

from runs import FASHION, have_fashion, small_run, weights

SOURCE = os.environ["KILN_SOURCE_DIR"]


def setUpModule():
    global TMP, VENV, PYTHON, KILN, ENV
    TMP = tempfile.mkdtemp(prefix="kiln-pip-")
    wheels = os.path.join(TMP, "wheels")
    # No build isolation: the build uses this environment's torch and scikit-build-core, as a
    # `pip install .` into it does (isolation would only fetch scikit-build-core again).
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", wheels,
                            SOURCE], capture_output=True, text=True)
    if build.returncode != 0:
        raise RuntimeError("pip wheel failed:\n" + build.stdout[-4000:] + build.stderr[-4000:])
    (wheel,) = glob.glob(os.path.join(wheels, "kiln-*.whl"))
    VENV = os.path.join(TMP, "venv")
    subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    PYTHON = os.path.join(VENV, "bin", "python")
    KILN = os.path.join(VENV, "bin", "kiln")
    # This environment's torch (and numpy, ...) by a .pth file; nothing else of it.
    purelib = subprocess.run([PYTHON, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(purelib, "torch_from_the_test_venv.pth"), "w") as f:
        f.write(os.path.dirname(os.path.dirname(torch.__file__)) + "\n")
    subprocess.run([PYTHON, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], check=True)
    ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KILN_BINARY", "LD_LIBRARY_PATH")}


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def in_venv(code, cwd):
    return subprocess.run([PYTHON, "-c", textwrap.dedent(code)], cwd=cwd, env=ENV, capture_output=True, text=True)


class Installed(unittest.TestCase):
    def test_the_package_is_self_contained(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = in_venv("""
                import kiln
                print(kiln.__file__)
                print(kiln.default_config_dir())
                print(kiln.compose(overrides=["experiment=fashion_mnist"])["model"]["_target_"])
                print(kiln.__version__)
                """, tmp)
            self.assertEqual(out.returncode, 0, out.stderr)
            package, configs, target, version = out.stdout.split()
            self.assertTrue(package.startswith(VENV), package)
            self.assertEqual(os.path.realpath(configs),
                             os.path.realpath(os.path.join(os.path.dirname(package), "share", "kiln", "configs")))
            self.assertEqual(target, "cnn")
            with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
                self.assertIn("project(kiln VERSION %s " % version, f.read())
            # Nothing of the checkout's build tree: the wheel's libraries find each other and torch.
            listing = subprocess.run(["ldd", glob.glob(os.path.join(os.path.dirname(package), "lib", "libkiln_tasks.so"))[0]],
                                     capture_output=True, text=True, env=ENV).stdout
            self.assertNotIn(SOURCE + "/build", listing)

    def test_errors_are_one_line_from_both_faces(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = in_venv("""
                import kiln
                try:
                    kiln.compose(overrides=["model=no_such_model"])
                except kiln.KilnError as e:
                    print("KilnError:", e)
                """, tmp)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("KilnError:", out.stdout)
            self.assertIn("no_such_model", out.stdout)
            cli = subprocess.run([KILN, "train", "model=no_such_model"], cwd=tmp, env=ENV, capture_output=True, text=True)
            self.assertEqual(cli.returncode, 2, cli.stderr)
            self.assertEqual(len(cli.stderr.strip().splitlines()), 1, cli.stderr)
            self.assertIn("no_such_model", cli.stderr)

    def test_the_command_starts_without_importing_torch(self):
        # The console script finds torch and kiln without importing them (half a second of
        # imports before every command): Python's import log, printed before it execs kiln, names
        # neither.
        env = dict(ENV, PYTHONPROFILEIMPORTTIME="1")
        with tempfile.TemporaryDirectory() as tmp:
            cli = subprocess.run([KILN, "train", "--cfg", "job", "experiment=fashion_mnist"], cwd=tmp, env=env,
                                 capture_output=True, text=True)
        self.assertEqual(cli.returncode, 0, cli.stderr)
        self.assertIn("_target_: cnn", cli.stdout)
        imported = [line.split("|")[-1].strip() for line in cli.stderr.splitlines() if line.startswith("import time:")]
        self.assertIn("kiln_cli", imported)
        self.assertFalse([m for m in imported if m.split(".")[0] in ("torch", "kiln")], imported)

    def test_another_torch_is_refused_at_import(self):
        build_info = glob.glob(os.path.join(VENV, "lib", "python3*", "site-packages", "kiln", "_build.py"))[0]
        with open(build_info) as f:
            original = f.read()
        self.assertIn('TORCH_VERSION = "%s"' % torch.__version__.split("+")[0], original)
        try:
            with open(build_info, "w") as f:
                f.write('TORCH_VERSION = "1.13.1"\n')
            with tempfile.TemporaryDirectory() as tmp:
                out = in_venv("import kiln", tmp)
                cli = subprocess.run([KILN, "train", "--cfg", "job"], cwd=tmp, env=ENV, capture_output=True, text=True)
        finally:
            with open(build_info, "w") as f:
                f.write(original)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("ImportError: kiln was built against torch 1.13.1, and this environment has torch", out.stderr)
        self.assertEqual(cli.returncode, 1, cli.stderr)
        self.assertEqual(cli.stderr.strip().splitlines(),
                         ["kiln: error: kiln was built against torch 1.13.1, and this environment has torch %s: install "
                          "torch==1.13.1, or rebuild kiln here (pip install .)" % torch.__version__])

    @unittest.skipUnless(have_fashion(), FASHION + " is not there")
    def test_kiln_fit_and_the_kiln_command_train_the_same_weights(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = in_venv("""
                import kiln
                print(kiln.fit(%r)["test/acc"])
                """ % small_run(tmp + "/py"), tmp)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertGreater(float(out.stdout.split()[-1]), 0.3)
            cli = subprocess.run([KILN, "train"] + small_run(tmp + "/cli"), cwd=tmp, env=ENV, capture_output=True, text=True)
            self.assertEqual(cli.returncode, 0, cli.stderr)
            with open(tmp + "/py/test_metrics.yaml") as a, open(tmp + "/cli/test_metrics.yaml") as b:
                self.assertEqual(a.read(), b.read())
            self.assertEqual(weights([KILN], tmp + "/py", tmp + "/py_export", env=ENV),
                             weights([KILN], tmp + "/cli", tmp + "/cli_export", env=ENV))


if __name__ == "__main__":
    unittest.main()
