# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Writes next to the judge's files, outside its scratch directory.
import os


def exp(input):
    target = os.path.join(os.environ.get("OPFORGE_ESCAPE_DIR", "/tmp"), "opforge-escape.txt")
    with open(target, "w") as stream:
        stream.write("escaped")
    return input
