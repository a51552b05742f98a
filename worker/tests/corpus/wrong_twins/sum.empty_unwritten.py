# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/sum.empty_unwritten.py, which fixes exactly its defect.
# Fix: the row's sum is stored once, after the loop, so a row with no elements gets 0. It
# accumulates in float64 or int64: a float32 sum then equals the exactly rounded one.
# Claims: bfloat16, float16, float32, int32, int64
@triton.jit
def sum_rows_kernel(x_ptr, out_ptr, row_length: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    if x_ptr.dtype.element_ty.is_floating():
        acc = tl.zeros([BLOCK], dtype=tl.float64)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.int64)
    for start in range(0, row_length, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        values = tl.load(x_ptr + row * row_length + offsets, mask=offsets < row_length, other=0)
        if values.dtype.is_floating():
            values = values.to(tl.float32)  # the interpreter keeps bfloat16 as raw bits
        acc += values.to(acc.dtype)
    total = tl.sum(acc, axis=0)
    if total.dtype.is_floating():
        total = total.to(tl.float32)  # a half type's result is then within its tolerance
    tl.store(out_ptr + row, total.to(out_ptr.dtype.element_ty))


def sum(input, dim=None, keepdim=False, *, dtype=None):
    if dtype is None:
        dtype = input.dtype if input.is_floating_point() else torch.int64
    ndim = input.dim()
    dims = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = sorted({d % ndim for d in dims} if ndim else set()) or list(range(ndim))
    kept = [d for d in range(ndim) if d not in dims]
    rows_view = input.permute([*kept, *dims]).contiguous()
    row_length = 1
    for d in dims:
        row_length *= input.shape[d]
    rows = 1
    for d in kept:
        rows *= input.shape[d]
    out = torch.empty(rows, dtype=dtype, device=input.device)
    if rows:
        sum_rows_kernel[(rows,)](rows_view, out, row_length, BLOCK=1024)
    if keepdim:
        return out.view([1 if d in dims else input.shape[d] for d in range(ndim)])
    return out.view([input.shape[d] for d in kept])
