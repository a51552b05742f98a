# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# kernel_torch's trick without naming torch: under the interpreter a kernel body is Python, and
# this one calls a tensor method inside the launch. It breaks no rule the harness refuses before
# running (module state is not one of them), so the dynamic checks must catch it.
STASH = {}


@triton.jit
def sneaky_kernel(out_ptr):
    STASH["out"].copy_(STASH["in"].exp())


def exp(input):
    out = torch.empty_like(input)
    STASH["in"], STASH["out"] = input, out
    sneaky_kernel[(1,)](out)
    return out
