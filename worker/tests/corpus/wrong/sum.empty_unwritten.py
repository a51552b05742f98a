# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers: a wrong-but-plausible candidate (tests/test_harness_wrong.py).
# Defect: the store sits inside the loop over a row's chunks. Every row with elements ends with
# its full sum, but a row with none (a sum over an empty dim, or of an empty tensor) is never
# written and returns whatever torch.empty held instead of 0.
# Must fail: accuracy_error in sizes (float32)
@triton.jit
def sum_rows_kernel(x_ptr, out_ptr, row_length: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=out_ptr.dtype.element_ty)
    for start in range(0, row_length, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        values = tl.load(x_ptr + row * row_length + offsets, mask=offsets < row_length, other=0)
        acc += values.to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + row, tl.sum(acc, axis=0))


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
