"""scripts/suite_report.py: the 10 slowest tests and the guard that a test over 120 s says why."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "suite_report.py")

CMAKELISTS = """\
add_test(NAME fast.one COMMAND true)

# Builds the wheel from this checkout.
# slow: builds every library again
add_test(NAME wheel.build
         COMMAND true)
add_test(NAME quiet.slow COMMAND true)
add_executable(trainer_test trainer_test.cc)
# slow: Trainer.Explained: trains three models to compare them
# slow: Trainer.AlsoExplained: resumes twice
gtest_discover_tests(trainer_test PROPERTIES TIMEOUT 600)
"""


def junit(times):
    cases = "".join('<testcase name="%s" classname="%s" time="%s" status="run"/>' % (n, n, t) for n, t in times.items())
    return '<?xml version="1.0"?><testsuite name="x" tests="%d">%s</testsuite>' % (len(times), cases)


def ctest_json(source):
    # What `ctest --show-only=json-v1` writes: add_test() tests with a backtrace into the
    # CMakeLists.txt, discovered GoogleTest tests with their binary as the command.
    cmakelists = os.path.join(source, "tests", "CMakeLists.txt")
    return {
        "backtraceGraph": {"commands": ["add_test"], "files": [cmakelists, "/build/trainer_test[1]_tests.cmake"],
                           "nodes": [{"file": 0}, {"command": 0, "file": 0, "line": 1, "parent": 0},
                                     {"command": 0, "file": 0, "line": 5, "parent": 0},
                                     {"command": 0, "file": 0, "line": 7, "parent": 0}, {"file": 1}]},
        "tests": [
            {"name": "fast.one", "backtrace": 1, "command": ["/usr/bin/true"]},
            {"name": "wheel.build", "backtrace": 2, "command": ["/usr/bin/true"]},
            {"name": "quiet.slow", "backtrace": 3, "command": ["/usr/bin/true"]},
            {"name": "Trainer.Explained", "backtrace": 4, "command": ["/build/bin/trainer_test", "--gtest_filter=x"]},
            {"name": "Trainer.Unexplained", "backtrace": 4, "command": ["/build/bin/trainer_test", "--gtest_filter=y"]},
        ],
    }


class SuiteReport(unittest.TestCase):
    def run_report(self, times, phases="Debian packages\t61\nbuild (build)\t1200\nctest\t539\n"):
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "tests"))
            with open(os.path.join(tmp, "tests", "CMakeLists.txt"), "w") as f:
                f.write(CMAKELISTS)
            with open(os.path.join(tmp, "suite.xml"), "w") as f:
                f.write(junit(times))
            with open(os.path.join(tmp, "tests.json"), "w") as f:
                json.dump(ctest_json(tmp), f)
            with open(os.path.join(tmp, "phases.tsv"), "w") as f:
                f.write(phases)
            return subprocess.run([sys.executable, SCRIPT, "--phases", os.path.join(tmp, "phases.tsv"),
                                   "--junit", os.path.join(tmp, "suite.xml"), "--tests", os.path.join(tmp, "tests.json"),
                                   "--source", tmp], capture_output=True, text=True)

    def test_prints_the_phases_and_the_slowest_tests_first(self):
        out = self.run_report({"fast.one": 1.5, "wheel.build": 300, "quiet.slow": 20, "Trainer.Explained": 130,
                               "Trainer.Unexplained": 90})
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines[0], "== suite wall time 30:00 (Debian packages 1:01, build (build) 20:00, ctest 8:59)")
        self.assertEqual(lines[1], "== 5 tests, 0 skipped; test time summed 9:02; the 10 slowest:")
        self.assertEqual([l.split()[-1] for l in lines[2:]],
                         ["wheel.build", "Trainer.Explained", "Trainer.Unexplained", "quiet.slow", "fast.one"])
        self.assertEqual(lines[2], "    300.0 s  wheel.build")

    def test_a_slow_test_without_its_reason_fails_the_suite_and_is_named(self):
        out = self.run_report({"fast.one": 1, "wheel.build": 400, "quiet.slow": 121, "Trainer.Explained": 500,
                               "Trainer.Unexplained": 130})
        self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
        tail = out.stdout.split("without a `# slow: why` comment beside their registration:\n")[1].splitlines()
        self.assertEqual(len(tail), 2, out.stdout)
        self.assertIn("quiet.slow  tests/CMakeLists.txt:7 (add `# slow: why` above it)", tail[0])
        self.assertIn("Trainer.Unexplained  tests/CMakeLists.txt:11 (gtest_discover_tests(trainer_test): "
                      "add `# slow: Trainer.Unexplained: why`)", tail[1])

    def test_overlapping_phases_count_once_in_the_wall_time(self):
        out = self.run_report({"fast.one": 1}, phases="Python packages\t30\nPython test packages (beside the build)\t50\n"
                                                        "build (build)\t600\nwall\t640\n")
        self.assertEqual(out.stdout.splitlines()[0], "== suite wall time 10:40 (Python packages 0:30, Python test "
                                                     "packages (beside the build) 0:50, build (build) 10:00)")

    def test_the_limit_is_120_seconds(self):
        self.assertEqual(self.run_report({"quiet.slow": 120}).returncode, 0)
        self.assertEqual(self.run_report({"quiet.slow": 120.1}).returncode, 1)


if __name__ == "__main__":
    unittest.main()
