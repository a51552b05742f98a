# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/square.int_through_float32.py, which fixes exactly its defect.
# Fix: integers are squared in their own dtype (wrapping as in torch.square); only floats go
# through float32.
# Claims: bfloat16, float16, float32, int32, int64
@triton.jit
def square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if x.dtype.is_floating():
        # A half type's square is exact in float32 and rounded once; and the interpreter keeps
        # bfloat16 as raw bits.
        x = x.to(tl.float32)
    tl.store(out_ptr + offsets, (x * x).to(out_ptr.dtype.element_ty), mask=mask)


def square(input):
    out = torch.empty_like(input)  # ATen's layout: a dense input's strides
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    n = x.numel()
    if n:
        square_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
