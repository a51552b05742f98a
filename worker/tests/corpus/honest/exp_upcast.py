# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest exp that computes in a float32 buffer and casts with torch: a copy, which is allowed.
@triton.jit
def exp_f32_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, tl.exp(x), mask=mask)


def exp(input):
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy);
    # the conversion back keeps it.
    buffer = torch.empty_like(input, dtype=torch.float32)
    x = (
        input
        if input.stride() == buffer.stride()
        else torch.empty_like(buffer, dtype=input.dtype).copy_(input)
    )
    if x.numel():
        exp_f32_kernel[(triton.cdiv(x.numel(), 512),)](x, buffer, x.numel(), BLOCK=512)
    return buffer.to(input.dtype)
