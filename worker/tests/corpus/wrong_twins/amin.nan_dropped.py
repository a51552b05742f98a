# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/amin.nan_dropped.py, which fixes exactly its defect.
# Fix: a row whose lanes hold a NaN stores NaN (the sum of its NaN lanes) instead of tl.min.
# Claims: bfloat16, float16, float32, int32, int64
@triton.jit
def amin_rows_kernel(x_ptr, out_ptr, row_length: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * row_length
    first = tl.load(base)
    least = tl.full([BLOCK], 0, dtype=first.dtype) + first
    for start in tl.range(0, row_length, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        values = tl.load(base + offsets, mask=offsets < row_length, other=first)
        least = tl.minimum(least, values, propagate_nan=tl.PropagateNan.ALL)
    nan_lanes = least != least
    nan_seen = tl.max(nan_lanes.to(tl.int32), axis=0) > 0
    nan_sum = tl.sum(tl.where(nan_lanes, least, 0), axis=0)
    tl.store(out_ptr + row, tl.where(nan_seen, nan_sum, tl.min(least, axis=0)))


def amin(input, dim=(), keepdim=False):
    ndim = input.dim()
    dims = [dim] if isinstance(dim, int) else list(dim)
    dims = sorted({d % ndim for d in dims} if ndim else set()) or list(range(ndim))
    kept = [d for d in range(ndim) if d not in dims]
    # Half types go through float32 copies (exact both ways): the interpreter keeps bfloat16 as
    # raw bits and converts its subnormals to signed zeros.
    half = input.dtype in (torch.float16, torch.bfloat16)
    rows_view = (input.to(torch.float32) if half else input).permute([*kept, *dims]).contiguous()
    row_length = 1
    for d in dims:
        row_length *= input.shape[d]
    rows = 1
    for d in kept:
        rows *= input.shape[d]
    out = torch.empty(rows, dtype=rows_view.dtype, device=input.device)
    if rows:
        amin_rows_kernel[(rows,)](rows_view, out, row_length, BLOCK=128)
    if keepdim:
        shape = [1 if d in dims else input.shape[d] for d in range(ndim)]
    else:
        shape = [input.shape[d] for d in kept]
    return out.to(input.dtype).view(shape)
