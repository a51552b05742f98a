# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest twin of timing/constant: isfinite computed by its kernel at every size.
@triton.jit
def isfinite_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x == x) & (tl.abs(x) != float("inf")), mask=mask)


def isfinite(input):
    x = input.contiguous()
    out = torch.empty(x.shape, dtype=torch.bool, device=x.device)
    if x.numel():
        isfinite_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out.view(input.shape)
