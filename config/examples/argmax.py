# Worked example: reduction. torch, triton and tl are provided by the harness (no imports).


# n_cols is never specialized: triton 3.6 turns an int argument equal to 1 into a constant, and
# this kernel then fails to compile on CUDA ("PassManager::run failed", seen on an H100).
@triton.jit(do_not_specialize=["n_cols"])
def argmax_kernel(rows_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row_start = rows_ptr + tl.program_id(0).to(tl.int64) * n_cols
    lanes = tl.arange(0, BLOCK_SIZE)
    # Lanes past the end re-read the last column: they tie with it and lose the tie (higher
    # index), so no sentinel value is needed and every dtype works the same way.
    cols = tl.minimum(lanes, n_cols - 1)
    values = tl.load(row_start + cols)
    # Half types compare in float32, which is exact (the interpreter keeps bfloat16 as raw bits).
    if values.dtype.is_fp16() or values.dtype.is_bf16():
        values = values.to(tl.float32)
    best_value = tl.max(values, axis=0)
    best_index = tl.argmax(values, axis=0, tie_break_left=True).to(tl.int64)
    # PyTorch treats NaN as the maximum: the first NaN wins.
    first_nan = tl.min(tl.where(values != values, cols, n_cols), axis=0).to(tl.int64)
    # A while loop, not range(): the interpreter cannot index with runtime scalars on numpy 2.4.
    block_start = BLOCK_SIZE
    while block_start < n_cols:
        cols = tl.minimum(block_start + lanes, n_cols - 1)
        values = tl.load(row_start + cols)
        if values.dtype.is_fp16() or values.dtype.is_bf16():
            values = values.to(tl.float32)
        block_value = tl.max(values, axis=0)
        block_index = block_start + tl.argmax(values, axis=0, tie_break_left=True).to(tl.int64)
        # Strictly greater: an equal value in a later block keeps the earlier index.
        best_index = tl.where(block_value > best_value, block_index, best_index)
        best_value = tl.maximum(best_value, block_value)
        block_nan = tl.min(tl.where(values != values, cols, n_cols), axis=0).to(tl.int64)
        first_nan = tl.minimum(first_nan, block_nan)
        block_start += BLOCK_SIZE
    tl.store(out_ptr + tl.program_id(0), tl.where(first_nan < n_cols, first_nan, best_index))


def argmax_wrapper(input, dim=None, keepdim=False):
    if dim is None:
        rows = input.reshape(1, -1)
        result_shape = [1] * input.dim() if keepdim else []
    else:
        # A 0-d tensor reduces like a 1-element vector along dim 0 or -1.
        ndim = max(input.dim(), 1)
        if not -ndim <= dim < ndim:
            raise IndexError(f"dim {dim} is out of range for a tensor of {input.dim()} dims")
        dim = dim % ndim
        vector = input.reshape(input.shape if input.dim() > 0 else (1,))
        moved = vector.movedim(dim, -1)
        rows = moved.reshape(-1, moved.shape[-1])
        result_shape = list(input.shape)
        if input.dim() > 0:
            if keepdim:
                result_shape[dim] = 1
            else:
                result_shape.pop(dim)
    n_rows, n_cols = rows.shape
    if n_cols == 0:
        raise IndexError("argmax(): cannot reduce over an empty dimension")
    # Each program reads one row linearly.
    rows = rows.contiguous()
    result = torch.empty(n_rows, dtype=torch.int64, device=input.device)
    if n_rows > 0:
        block_size = min(triton.next_power_of_2(n_cols), 1024)
        argmax_kernel[(n_rows,)](rows, result, n_cols, BLOCK_SIZE=block_size)
    return result.reshape(result_shape)
