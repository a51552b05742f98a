# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Starts a process through the C helper behind subprocess, which raises no audit event itself.
import _posixsubprocess


def exp(input):
    _posixsubprocess.fork_exec()  # subprocess._fork_exec is the same function
    return input
