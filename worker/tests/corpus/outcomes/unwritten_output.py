# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# accuracy_error: prod, right on every input but an empty one, whose product (1) it never
# computes: it returns the allocation as it came, unwritten.
@triton.jit
def prod_rows_kernel(x_ptr, out_ptr, row_length: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    product = tl.full([BLOCK], 1.0, dtype=tl.float64)
    for start in tl.range(0, row_length, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        values = tl.load(x_ptr + row * row_length + offsets, mask=offsets < row_length, other=1.0)
        product *= values.to(tl.float64)
    result = tl.reduce(product, 0, _multiply)
    tl.store(out_ptr + row, result.to(out_ptr.dtype.element_ty))


@triton.jit
def _multiply(a, b):
    return a * b


def prod(input, dim=None, keepdim=False, *, dtype=None):
    ndim = input.dim()
    dims = list(range(ndim)) if dim is None else [dim % ndim] if ndim else []
    kept = [d for d in range(ndim) if d not in dims]
    rows, row_length = 1, 1
    for d in kept:
        rows *= input.shape[d]
    for d in dims:
        row_length *= input.shape[d]
    if keepdim:
        shape = [1 if d in dims else input.shape[d] for d in range(ndim)]
    else:
        shape = [input.shape[d] for d in kept]
    out = torch.empty(shape, dtype=dtype or input.dtype, device=input.device)
    if input.numel() == 0:
        return out  # the bug: the empty product is 1, never written here
    rows_view = input.permute([*kept, *dims]).contiguous()
    prod_rows_kernel[(rows,)](rows_view, out, row_length, BLOCK=128)
    return out
