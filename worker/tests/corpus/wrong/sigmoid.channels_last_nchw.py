# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: 4-D inputs are taken for NCHW images and made contiguous, the result allocated like
# that copy: a channels_last input gives an NCHW result where torch.sigmoid keeps channels_last.
# Other layouts keep the input's strides, so only a channels_last sample shows it.
# Must fail: accuracy_error/layout in layouts (float32)
@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


def sigmoid(input):
    source = input.contiguous() if input.dim() == 4 else input
    out = torch.empty_like(source)
    x = source if source.stride() == out.stride() else torch.empty_like(out).copy_(source)
    n = x.numel()
    if n:
        sigmoid_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
