# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest indexing op: index_select. The input is seen as (outer, size, inner); every output
# element gathers input[o, index[k], i].
@triton.jit
def index_select_kernel(x_ptr, index_ptr, out_ptr, total, size, count, inner, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < total
    i = offsets % inner
    k = (offsets // inner) % count
    o = offsets // (inner * count)
    source = tl.load(index_ptr + k, mask=mask, other=0)
    values = tl.load(x_ptr + (o * size + source) * inner + i, mask=mask)
    tl.store(out_ptr + offsets, values, mask=mask)


def index_select(input, dim, index):
    x = input.contiguous()
    ndim = max(x.dim(), 1)
    dim = dim % ndim
    shape = list(x.shape) or [1]
    outer = 1
    for s in shape[:dim]:
        outer *= s
    inner = 1
    for s in shape[dim + 1 :]:
        inner *= s
    index = index.reshape(-1).contiguous()
    out_shape = shape[:dim] + [index.numel()] + shape[dim + 1 :]
    out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
    total = out.numel()
    if total:
        index_select_kernel[(triton.cdiv(total, 256),)](
            x, index, out, total, shape[dim], index.numel(), inner, BLOCK=256
        )
    return out.view(input.shape) if input.dim() == 0 else out
