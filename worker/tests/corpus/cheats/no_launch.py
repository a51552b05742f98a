# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# No kernel at all: a copy of the input is returned. (An allocation returned unwritten is an
# accuracy error instead: outcomes/unwritten_output.)
def exp(input):
    return input.clone()
