# Worked example: elementwise. torch, triton and tl are provided by the harness (no imports).


@triton.jit
def exp_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    # int64 offsets: a block index times BLOCK_SIZE overflows int32 on large tensors.
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    # Half types and integers are computed in float32, as PyTorch does, then rounded once.
    y = tl.exp(x.to(tl.float32))
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def exp_wrapper(input):
    # Integer inputs promote to the default float dtype, like torch.exp.
    result_dtype = input.dtype if input.is_floating_point() else torch.get_default_dtype()
    # PyTorch gives an elementwise result its input's layout (a transposed or channels_last input,
    # a transposed or channels_last result): empty_like keeps a dense input's strides. The kernel
    # walks memory linearly, so input and result must share them: a strided input is copied into
    # the result's layout first.
    result = torch.empty_like(input, dtype=result_dtype)
    same_layout = input.stride() == result.stride()
    x = input if same_layout else torch.empty_like(result, dtype=input.dtype).copy_(input)
    n_elements = x.numel()
    if n_elements > 0:
        block_size = 1024
        grid = (triton.cdiv(n_elements, block_size),)
        exp_kernel[grid](x, result, n_elements, BLOCK_SIZE=block_size)
    return result
