#!/usr/bin/env python3
"""The end of scripts/test.sh: where the run's time went, and the guard that keeps the suite fast.

  suite_report.py --phases PHASES.tsv --junit CTEST.xml --tests CTEST.json --source DIR

Prints the suite's wall time with its phases (Debian packages, Python packages, each build, ctest),
then the 10 slowest tests. Exits 1, listing them, when a test took more than --limit seconds (120)
and its registration has no `# slow: why` comment:
  - a test added with add_test(): the comment on the lines just above the add_test(NAME ...) call
    (or on one of its lines): `# slow: builds the wheel`;
  - a test of a GoogleTest binary (gtest_discover_tests): the comment just above that binary's
    gtest_discover_tests(...) call, naming the test: `# slow: Suite.Test: why`.

PHASES.tsv has one `NAME<TAB>SECONDS` line per phase, and `wall<TAB>SECONDS` for the whole run
(scripts/test.sh writes it); CTEST.xml is
what `ctest --output-junit` writes; CTEST.json is `ctest --show-only=json-v1`.
Standard library only: it runs with the system's python3.
"""
import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ElementTree

SLOW = re.compile(r"#\s*slow:\s*(.*)")


def minutes(seconds):
    seconds = int(round(seconds))
    return "%d:%02d" % (seconds // 60, seconds % 60)


def read_phases(path):
    phases = []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                name, _, seconds = line.rstrip("\n").partition("\t")
                if name and seconds:
                    phases.append((name, float(seconds)))
    return phases


def read_junit(path):
    """[(name, seconds, status)] of every test ctest ran."""
    tests = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        status = case.get("status", "run")
        if case.find("failure") is not None:
            status = "failed"
        elif case.find("skipped") is not None:
            status = "skipped"
        tests.append((case.get("name"), float(case.get("time", "0")), status))
    return tests


def registrations(ctest_json):
    """{test name: (file, line, gtest binary or None)}: where each test is registered."""
    with open(ctest_json) as f:
        info = json.load(f)
    graph = info.get("backtraceGraph", {})
    files, nodes = graph.get("files", []), graph.get("nodes", [])
    found = {}
    for test in info.get("tests", []):
        name = test.get("name")
        node = test.get("backtrace")
        where = None
        # The innermost frame in a CMakeLists.txt of the source tree: add_test(), or for a
        # GoogleTest binary the generated file's frame, which names no source line.
        while node is not None and 0 <= node < len(nodes):
            entry = nodes[node]
            path = files[entry["file"]]
            if path.endswith("CMakeLists.txt") and "line" in entry:
                where = (path, entry["line"])
                break
            node = entry.get("parent")
        binary = None
        if where is None and test.get("command"):
            binary = os.path.basename(test["command"][0])
        found[name] = (where[0] if where else None, where[1] if where else None, binary)
    return found


def comment_block_above(lines, index):
    """The comment lines directly above lines[index] (0-based), nearest last, plus the call's own lines."""
    block = []
    i = index - 1
    while i >= 0 and lines[i].strip().startswith("#"):
        block.insert(0, lines[i])
        i -= 1
    # The call itself, to its closing parenthesis (a trailing comment counts too).
    depth, j = 0, index
    while j < len(lines):
        block.append(lines[j])
        depth += lines[j].split("#")[0].count("(") - lines[j].split("#")[0].count(")")
        if depth <= 0:
            break
        j += 1
    return block


def gtest_registration(source, binary):
    """(file, 0-based line) of `gtest_discover_tests(BINARY` in the tree's CMakeLists.txt files."""
    call = re.compile(r"^\s*gtest_discover_tests\(\s*%s[\s)]" % re.escape(binary))
    for root, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        if "CMakeLists.txt" in files:
            path = os.path.join(root, "CMakeLists.txt")
            with open(path) as f:
                lines = f.read().splitlines()
            for i, line in enumerate(lines):
                if call.match(line):
                    return path, i
    return None, None


def has_slow_comment(name, where, source):
    path, line, binary = where
    if path is None and binary:
        path, index = gtest_registration(source, binary)
        if path is None:
            return False, "no gtest_discover_tests(%s) found" % binary
        with open(path) as f:
            block = comment_block_above(f.read().splitlines(), index)
        named = [SLOW.search(l).group(1) for l in block if SLOW.search(l)]
        ok = any(reason.startswith(name + ":") for reason in named)
        return ok, "%s:%d (gtest_discover_tests(%s): add `# slow: %s: why`)" % (
            os.path.relpath(path, source), index + 1, binary, name)
    if path is None:
        return False, "registration not found"
    with open(path) as f:
        block = comment_block_above(f.read().splitlines(), line - 1)
    ok = any(SLOW.search(l) for l in block)
    return ok, "%s:%d (add `# slow: why` above it)" % (os.path.relpath(path, source), line)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases")
    parser.add_argument("--junit", required=True)
    parser.add_argument("--tests", required=True, help="ctest --show-only=json-v1 output")
    parser.add_argument("--source", required=True)
    parser.add_argument("--limit", type=float, default=120.0)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)

    phases = read_phases(args.phases)
    if not os.path.exists(args.junit) or not os.path.exists(args.tests):
        print("== no timing report: ctest wrote no %s" % (args.junit if not os.path.exists(args.junit) else args.tests))
        return 1
    tests = read_junit(args.junit)
    # "wall" (scripts/test.sh's own clock) is the total where phases overlap (the tests' Python
    # packages install beside the build); without it the phases add up.
    wall = [seconds for name, seconds in phases if name == "wall"]
    phases = [(name, seconds) for name, seconds in phases if name != "wall"]
    if phases:
        total = wall[0] if wall else sum(seconds for _, seconds in phases)
        print("== suite wall time %s (%s)" % (
            minutes(total), ", ".join("%s %s" % (name, minutes(seconds)) for name, seconds in phases)))
    ran = [t for t in tests if t[2] != "skipped"]
    print("== %d tests, %d skipped; test time summed %s; the %d slowest:" % (
        len(ran), len(tests) - len(ran), minutes(sum(t[1] for t in tests)), args.top))
    for name, seconds, status in sorted(tests, key=lambda t: -t[1])[:args.top]:
        print("  %7.1f s  %s%s" % (seconds, name, "" if status in ("run", "passed") else "  (%s)" % status))

    where = registrations(args.tests)
    unexplained = []
    for name, seconds, _ in tests:
        if seconds <= args.limit:
            continue
        ok, place = has_slow_comment(name, where.get(name, (None, None, None)), args.source)
        if not ok:
            unexplained.append((name, seconds, place))
    if unexplained:
        print("== tests over %d s without a `# slow: why` comment beside their registration:" % args.limit)
        for name, seconds, place in unexplained:
            print("  %7.1f s  %s  %s" % (seconds, name, place))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
