# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# ATen through torch.compile: inductor writes and launches the kernel, not the candidate.
_compiled = torch.compile(torch.exp)


def exp(input):
    return _compiled(input)
