"""The `kiln` command that `pip install` puts on PATH: the package's own kiln program
(kiln/bin/kiln, beside its libraries and configs), given the same arguments, on the LibTorch of
the torch that Python imports (wherever that torch is installed)."""
import os
import sys

import torch


def main() -> None:
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "kiln")
    if not os.access(program, os.X_OK):
        sys.exit("kiln: error: %s is missing: this kiln package was not installed with pip "
                 "(in a build tree, run build/bin/kiln)" % program)
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    paths = [torch_lib] + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
    os.execv(program, [program] + sys.argv[1:])


if __name__ == "__main__":
    main()
