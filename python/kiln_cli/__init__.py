"""The `kiln` command that `pip install` puts on PATH: the kiln package's own program
(kiln/bin/kiln, beside its libraries and configs), given the same arguments, on the LibTorch of
the torch this Python finds (wherever that torch is installed).

It is a package of its own, beside `kiln`, so that starting it imports neither torch nor kiln
(half a second): it finds both where `import` would, reads their versions from their files, and
execs the program."""
import importlib.util
import os
import re
import sys


def _package_dir(name):
    # find_spec of a top-level package locates it without running its __init__.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _version_in(path, name):
    try:
        with open(path, encoding="utf-8") as f:
            found = re.search(r"^%s\s*=\s*['\"]([^'\"]+)['\"]" % name, f.read(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def main() -> None:
    kiln_dir = _package_dir("kiln")
    program = os.path.join(kiln_dir, "bin", "kiln") if kiln_dir else "kiln/bin/kiln"
    if not kiln_dir or not os.access(program, os.X_OK):
        sys.exit("kiln: error: %s is missing: this kiln package was not installed with pip "
                 "(in a build tree, run build/bin/kiln)" % program)
    built = _version_in(os.path.join(kiln_dir, "_build.py"), "TORCH_VERSION")
    torch_dir = _package_dir("torch")
    if torch_dir is None:
        sys.exit("kiln: error: torch is not installed in this environment: install torch==%s" % built)
    have = _version_in(os.path.join(torch_dir, "version.py"), "__version__")
    if built and have and have.split("+")[0] != built:
        sys.exit("kiln: error: kiln was built against torch %s, and this environment has torch %s: install torch==%s, "
                 "or rebuild kiln here (pip install .)" % (built, have, built))
    paths = [os.path.join(torch_dir, "lib")]
    paths += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
    os.execv(program, [program] + sys.argv[1:])


if __name__ == "__main__":
    main()
