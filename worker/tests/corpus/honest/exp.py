# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest elementwise kernel: exp. Computed in float32, stored in the output's dtype: the input's
# when it is floating, else the default float dtype (torch.exp promotes integers).
@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.exp(x.to(tl.float32)).to(out_ptr.dtype.element_ty), mask=mask)


def exp(input):
    dtype = input.dtype if input.is_floating_point() else torch.get_default_dtype()
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    out = torch.empty_like(input, dtype=dtype)
    x = (
        input
        if input.stride() == out.stride()
        else torch.empty_like(out, dtype=input.dtype).copy_(input)
    )
    n = x.numel()
    if n:
        exp_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
