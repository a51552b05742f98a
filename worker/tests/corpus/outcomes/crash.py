# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# crash: an unmasked load far outside the tensor faults (SIGSEGV under the interpreter,
# an illegal address on a GPU).
@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets + (1 << 44))
    tl.store(out_ptr + offsets, tl.exp(x), mask=offsets < n)


def exp(input):
    out = torch.empty_like(input)
    exp_kernel[(1,)](input, out, input.numel(), BLOCK=128)
    return out
