# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# ATen fallback through torch.ops.aten, reached by a computed name.
def exp(input):
    return getattr(torch.ops.aten, "ex" + "p").default(input)
