# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/sqrt.flat_strided.py, which fixes exactly its defect.
# Fix: a strided input is copied into the output's layout (a dense one has it: empty_like keeps
# its strides) before it is indexed flat.
# Claims: bfloat16, float16, float32
@triton.jit
def sqrt_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.sqrt_rn(x), mask=mask)


def sqrt(input):
    # Half types go through float32 copies (exact both ways): the interpreter keeps bfloat16 as
    # raw bits and converts its subnormals to signed zeros.
    half = input.dtype in (torch.float16, torch.bfloat16)
    wide = input.to(torch.float32) if half else input
    out = torch.empty_like(wide)  # ATen's layout: a dense input's strides
    x = wide if wide.stride() == out.stride() else torch.empty_like(out).copy_(wide)
    n = x.numel()
    if n:
        sqrt_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.to(input.dtype)
