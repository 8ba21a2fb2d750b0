"""README.md is a front page (issue 51, item 7): it starts with the two commands, stays short, shows
the report page as a PNG that is there, and no relative link in it or in docs/ leads nowhere (a
link to a heading of a Markdown page must find that heading, as GitHub names its anchors)."""
import os
import re
import struct
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

FIRST_LINES = [
    "# kiln",
    "",
    "```bash",
    "scripts/setup.sh && build/bin/kiln train experiment=fashion_mnist",
    "scripts/test.sh",
    "```",
]
MAX_README_LINES = 150
MAX_TABLE_CELL = 300
MAX_PICTURE_BYTES = 300 * 1024

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.IGNORECASE)
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?\s*\)|<img\b[^>]*?\bsrc=\"([^\"]+)\"", re.IGNORECASE)


def outside_code_blocks(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        marker = re.match(r"\s*(`{3,}|~{3,})", line)
        if marker:
            if fence is None:
                fence = marker.group(1)
            elif marker.group(1).startswith(fence):
                fence = None
        elif fence is None:
            yield number, line


def prose_lines(text):
    """outside_code_blocks, with inline code blanked."""
    for number, line in outside_code_blocks(text):
        yield number, re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)


def links(text):
    """(line number, target) of each Markdown or HTML link and picture outside code. The lines are
    scanned joined again, as a link's text may run onto the next line."""
    numbered = dict(prose_lines(text))
    prose = "\n".join(numbered.get(n, "") for n in range(1, len(text.splitlines()) + 1))
    found = [(m.start(1), m.group(1)) for pattern in (LINK, HTML_LINK) for m in pattern.finditer(prose)]
    return [(prose.count("\n", 0, at) + 1, target) for at, target in sorted(found)]


def heading_anchors(text):
    """The anchors GitHub gives a page's headings: the heading's text lower-cased, everything but
    letters, digits, '_', '-' and spaces dropped, spaces made '-'; a repeated one gets -1, -2, ..."""
    anchors, seen = set(), {}
    for _, line in outside_code_blocks(text):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))  # a link: its text
        title = re.sub(r"<[^>]+>", "", title)
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
    return anchors


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    for folder, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def broken_links(root):
    """'FILE:LINE: TARGET (why)' for each relative link that leads nowhere."""
    problems = []
    anchors_of = {}
    for page in markdown_files(root):
        with open(page, encoding="utf-8") as f:
            text = f.read()
        for number, target in links(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # https:, mailto:, ...
            path, _, anchor = target.partition("#")
            where = "%s:%d: %s" % (os.path.relpath(page, root), number, target)
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(resolved):
                problems.append(where + " (no such file)")
                continue
            if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
                if resolved not in anchors_of:
                    with open(resolved, encoding="utf-8") as f:
                        anchors_of[resolved] = heading_anchors(f.read())
                if anchor not in anchors_of[resolved]:
                    problems.append(where + " (no such heading)")
    return problems


def png_size(path):
    """(width, height) of a PNG file, None when the file is not one."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def readme_problems(root):
    """What keeps README.md from being a front page, one line each."""
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        text = f.read()
    lines = text.splitlines()
    problems = []
    if lines[:len(FIRST_LINES)] != FIRST_LINES:
        problems.append("README.md does not start with the two commands:\n" + "\n".join(FIRST_LINES))
    if len(lines) > MAX_README_LINES:
        problems.append("README.md has %d lines (at most %d): the details belong under docs/ (docs/status.md)"
                        % (len(lines), MAX_README_LINES))
    for number, line in prose_lines(text):
        if line.lstrip().startswith("|"):
            for cell in line.strip().strip("|").split("|"):
                if len(cell.strip()) > MAX_TABLE_CELL:
                    problems.append("README.md:%d: a table cell of %d characters (at most %d): move it to docs/status.md"
                                    % (number, len(cell.strip()), MAX_TABLE_CELL))
    images = [a or b for _, line in prose_lines(text) for a, b in IMAGE.findall(line)]
    if not images:
        problems.append("README.md shows no picture (docs/images/report.png, scripts/readme_screenshot.sh draws it)")
    for image in images:
        path = os.path.join(root, image)
        if not os.path.isfile(path):
            problems.append("README.md's picture %s is not there (scripts/readme_screenshot.sh draws it)" % image)
            continue
        size = png_size(path)
        if size is None:
            problems.append("README.md's picture %s is not a PNG" % image)
        elif not (640 <= size[0] <= 2560 and 320 <= size[1] <= 2560):
            problems.append("README.md's picture %s is %dx%d pixels" % ((image,) + size))
        if os.path.getsize(path) > MAX_PICTURE_BYTES:
            problems.append("README.md's picture %s has %d bytes (at most %d)" % (image, os.path.getsize(path), MAX_PICTURE_BYTES))
    if "docs/status.md" not in [target.partition("#")[0] for _, target in links(text)]:
        problems.append("README.md does not link docs/status.md, where the status table and the figures are")
    return problems


class ThisCheckout(unittest.TestCase):
    def test_readme_is_a_front_page(self):
        self.assertEqual(readme_problems(ROOT), [])

    def test_no_relative_link_leads_nowhere(self):
        self.assertEqual(broken_links(ROOT), [])

    def test_the_picture_has_a_script_that_draws_it(self):
        script = os.path.join(ROOT, "scripts", "readme_screenshot.sh")
        self.assertTrue(os.access(script, os.X_OK), script)


def png(width, height):
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height) + b"\x08\x06\x00\x00\x00"


class TheChecksCatch(unittest.TestCase):
    """The checks on a small tree of their own: each kind of fault is named."""

    README = "\n".join(FIRST_LINES) + (
        "\n\nSee [the status](docs/status.md) and [the CLI](docs/cli.md#exit-codes).\n\n"
        "![the report](docs/images/report.png)\n\n```bash\nx = a[0](b)   # code, not a link\n```\n")

    def tree(self, readme=None, cli="# The `kiln` command line\n\n## Exit codes\n", picture=None):
        temporary = tempfile.TemporaryDirectory()
        self.addCleanup(temporary.cleanup)
        root = temporary.name
        os.makedirs(os.path.join(root, "docs", "images"))
        files = {"README.md": readme or self.README, "docs/cli.md": cli,
                 "docs/status.md": "# Where kiln stands\n\nBack to [the README](../README.md#kiln).\n"}
        for name, text in files.items():
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        with open(os.path.join(root, "docs", "images", "report.png"), "wb") as f:
            f.write(png(1280, 1960) if picture is None else picture)
        return root

    def test_a_good_tree_passes(self):
        root = self.tree()
        self.assertEqual(readme_problems(root), [])
        self.assertEqual(broken_links(root), [])

    def test_a_link_to_a_missing_file(self):
        root = self.tree(cli="# CLI\n\n## Exit codes\n\nSee [the\nsweeps](sweeps.md) and [`x`](../scripts/x.sh).\n")
        self.assertEqual(broken_links(root), ["docs/cli.md:6: sweeps.md (no such file)",
                                              "docs/cli.md:6: ../scripts/x.sh (no such file)"])

    def test_a_link_to_a_missing_heading(self):
        root = self.tree(cli="# CLI\n\n## Exit status\n")
        self.assertEqual(broken_links(root), ["README.md:8: docs/cli.md#exit-codes (no such heading)"])

    def test_anchors_follow_github(self):
        anchors = heading_anchors("# LibTorch: PyPI's torch, pinned\n## Finding a learning rate (`kiln tune lr_find`)\n"
                                  "## kiln::Predictor (C++ library)\n## Notes\n## Notes\n```\n# not a heading\n```\n")
        self.assertEqual(anchors, {"libtorch-pypis-torch-pinned", "finding-a-learning-rate-kiln-tune-lr_find",
                                   "kilnpredictor-c-library", "notes", "notes-1"})

    def test_a_readme_that_does_not_start_with_the_commands(self):
        root = self.tree(readme=self.README.replace("scripts/test.sh", "scripts/test.sh --all"))
        self.assertIn("does not start with the two commands", readme_problems(root)[0])

    def test_a_long_readme_and_a_long_cell(self):
        long = self.README + "| part | state |\n| --- | --- |\n| Trainer | " + "x" * 400 + " |\n" + "more\n" * 150
        problems = readme_problems(self.tree(readme=long))
        self.assertTrue(any("lines (at most 150)" in p for p in problems), problems)
        self.assertTrue(any("a table cell of 400 characters" in p for p in problems), problems)

    def test_a_missing_or_wrong_picture(self):
        self.assertIn("is not a PNG", readme_problems(self.tree(picture=b"GIF89a" + b"\0" * 40))[0])
        self.assertIn("is 1x1 pixels", readme_problems(self.tree(picture=png(1, 1)))[0])
        root = self.tree()
        os.remove(os.path.join(root, "docs", "images", "report.png"))
        self.assertIn("is not there", readme_problems(root)[0])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:], verbosity=2)
