# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# sgn as input / |input| with |input| from torch.abs: an exported package that also serves abs
# must run that call on ATen's own abs (a library kernel's calls never re-enter the library).
@triton.jit
def sgn_kernel(x_ptr, magnitude_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    magnitude = tl.load(magnitude_ptr + offsets, mask=mask)
    safe = tl.where(magnitude == 0, 1.0, magnitude)  # masked lanes and zeros: no 0 / 0
    tl.store(out_ptr + offsets, tl.where(magnitude == 0, x * 0, x / safe), mask=mask)


def sgn(input):
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    out = torch.empty_like(input)
    x = (
        input
        if input.stride() == out.stride()
        else torch.empty_like(out, dtype=input.dtype).copy_(input)
    )
    magnitude = torch.abs(x)
    if x.numel():
        sgn_kernel[(triton.cdiv(x.numel(), 1024),)](x, magnitude, out, x.numel(), BLOCK=1024)
    return out
