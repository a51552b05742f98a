# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest elementwise kernel: exp, floating dtypes.
@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.exp(x.to(tl.float32)).to(x.dtype), mask=mask)


def exp(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        exp_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.view(input.shape)
