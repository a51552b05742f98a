# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest reduction: amax over any dims, keepdim or not. The reduced dims are moved last and
# made contiguous (a torch copy), then each row is reduced by one program. NaN propagates, as in
# torch.amax.
@triton.jit
def amax_rows_kernel(x_ptr, out_ptr, row_length: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * row_length
    first = tl.load(base)
    best = tl.full([BLOCK], 0, dtype=first.dtype) + first
    for start in tl.range(0, row_length, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        values = tl.load(base + offsets, mask=offsets < row_length, other=first)
        # On CUDA the maximum of two bfloat16 values is computed in float32: it casts back
        # exactly, and the loop-carried accumulator keeps the input's type.
        best = tl.maximum(best, values, propagate_nan=tl.PropagateNan.ALL).to(first.dtype)
    # tl.max ignores NaN: a row with a NaN gets the sum of its NaN lanes, a NaN. (Tested and
    # summed in float32, which holds every bfloat16 and float16 exactly: the interpreter compares
    # and adds bfloat16 by its bits.)
    wide = best.to(tl.float32)
    nan_lanes = wide != wide
    nan_seen = tl.max(nan_lanes.to(tl.int32), axis=0) > 0
    nan_sum = tl.sum(tl.where(nan_lanes, wide, 0.0), axis=0).to(first.dtype)
    tl.store(out_ptr + row, tl.where(nan_seen, nan_sum, tl.max(best, axis=0)))


def amax(input, dim=(), keepdim=False):
    ndim = input.dim()
    dims = [dim] if isinstance(dim, int) else list(dim)
    dims = sorted({d % ndim for d in dims} if ndim else set()) or list(range(ndim))
    kept = [d for d in range(ndim) if d not in dims]
    rows_view = input.permute([*kept, *dims]).contiguous()
    row_length = 1
    for d in dims:
        row_length *= input.shape[d]
    rows = rows_view.numel() // max(row_length, 1)
    out = torch.empty(rows, dtype=input.dtype, device=input.device)
    if rows:
        amax_rows_kernel[(rows,)](rows_view, out, row_length, BLOCK=128)
    if keepdim:
        shape = [1 if d in dims else input.shape[d] for d in range(ndim)]
    else:
        shape = [input.shape[d] for d in kept]
    return out.view(shape)
