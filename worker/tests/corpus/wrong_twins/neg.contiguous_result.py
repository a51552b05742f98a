# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/neg.contiguous_result.py, which fixes exactly its defect.
# Fix: the result is allocated with torch.empty_like(input), which keeps a dense input's strides
# (read in place, flat over the same memory order); a strided input is copied into the result's
# layout first.
# Claims: bfloat16, float16, float32, int32, int64
@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if x.dtype.is_floating():
        x = x.to(tl.float32)  # exact here; and the interpreter keeps bfloat16 as raw bits
    tl.store(out_ptr + offsets, (x * -1).to(out_ptr.dtype.element_ty), mask=mask)


def neg(input):
    out = torch.empty_like(input)
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        neg_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
