# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest shape op: cat. Each input, cast to the promoted dtype of them all, is copied into its
# slice of the output, seen as (outer, size_along_dim * inner) rows of the output's
# (outer, total * inner).
@triton.jit
def copy_block_kernel(src_ptr, dst_ptr, numel, src_row, dst_row, dst_offset, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    row = offsets // src_row
    column = offsets % src_row
    values = tl.load(src_ptr + offsets, mask=mask)
    tl.store(dst_ptr + dst_offset + row * dst_row + column, values, mask=mask)


def cat(tensors, dim=0):
    # Legacy rule: 1-D empty tensors are skipped whatever the other shapes are.
    parts = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0)]
    if not parts:
        dtype = tensors[0].dtype
        for t in tensors[1:]:
            dtype = torch.promote_types(dtype, t.dtype)
        return torch.empty(0, dtype=dtype, device=tensors[0].device)
    reference = parts[0]
    dtype = reference.dtype
    for part in parts[1:]:
        dtype = torch.promote_types(dtype, part.dtype)
    dim = dim % reference.dim()
    shape = list(reference.shape)
    shape[dim] = sum(t.shape[dim] for t in parts)
    out = torch.empty(shape, dtype=dtype, device=reference.device)
    inner = 1
    for s in shape[dim + 1 :]:
        inner *= s
    offset = 0
    for part in parts:
        source = part.to(dtype).contiguous()
        if source.numel():
            copy_block_kernel[(triton.cdiv(source.numel(), 256),)](
                source,
                out,
                source.numel(),
                part.shape[dim] * inner,
                shape[dim] * inner,
                offset * inner,
                BLOCK=256,
            )
        offset += part.shape[dim]
    return out
