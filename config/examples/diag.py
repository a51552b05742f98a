# Worked example: indexing. torch, triton and tl are provided by the harness (no imports).


@triton.jit
def diag_embed_kernel(x_ptr, x_stride, out_ptr, size, diagonal, BLOCK_SIZE: tl.constexpr):
    # One program per output row; every element is written, so the output needs no zero fill.
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_SIZE)
    # A while loop, not range(): the interpreter cannot index with runtime scalars on numpy 2.4.
    block_start = 0
    while block_start < size:
        cols = block_start + lanes
        in_row = cols < size
        on_diagonal = (cols - row == diagonal) & in_row
        # On the diagonal, the source index is the smaller of row and column.
        source = tl.minimum(row, cols)
        values = tl.load(x_ptr + source * x_stride, mask=on_diagonal, other=0)
        tl.store(out_ptr + row * size + cols, values, mask=in_row)
        block_start += BLOCK_SIZE


@triton.jit
def diag_extract_kernel(
    x_ptr, stride_row, stride_col, first_row, first_col, out_ptr, length, BLOCK_SIZE: tl.constexpr
):
    index = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = index < length
    # Strides come from the input, so non-contiguous and transposed inputs need no copy.
    source = (first_row + index) * stride_row + (first_col + index) * stride_col
    tl.store(out_ptr + index, tl.load(x_ptr + source, mask=mask), mask=mask)


def diag_wrapper(input, diagonal=0):
    block_size = 128
    if input.dim() == 1:
        size = input.shape[0] + abs(diagonal)
        result = torch.empty((size, size), dtype=input.dtype, device=input.device)
        if size > 0:
            diag_embed_kernel[(size,)](
                input, input.stride(0), result, size, diagonal, BLOCK_SIZE=block_size
            )
        return result
    if input.dim() != 2:
        raise RuntimeError(f"diag(): expected a 1-D or 2-D tensor, got {input.dim()}-D")
    n_rows, n_cols = input.shape
    first_row = max(-diagonal, 0)
    first_col = max(diagonal, 0)
    length = max(min(n_rows - first_row, n_cols - first_col), 0)
    result = torch.empty((length,), dtype=input.dtype, device=input.device)
    if length > 0:
        grid = (triton.cdiv(length, block_size),)
        diag_extract_kernel[grid](
            input,
            input.stride(0),
            input.stride(1),
            first_row,
            first_col,
            result,
            length,
            BLOCK_SIZE=block_size,
        )
    return result
