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
    x = input.contiguous()
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    n = x.numel()
    if n:
        exp_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.view(input.shape)
