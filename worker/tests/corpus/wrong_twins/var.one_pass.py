# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/var.one_pass.py, which fixes exactly its defect.
# Fix: two passes: the mean first, then the sum of squared deviations from it, where nothing
# large cancels.
# Claims: float32
@triton.jit
def var_kernel(x_ptr, out_ptr, n, divisor, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + row * n + offsets, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    deviations = tl.where(mask, x - mean, 0.0)
    tl.store(out_ptr + row, tl.sum(deviations * deviations, axis=0) / divisor)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if correction is None:
        correction = 0 if unbiased is False else 1
    dims = input.dim() or 1
    if dim is None:
        reduced = list(range(dims))
    else:
        reduced = sorted({d % dims for d in ([dim] if isinstance(dim, int) else dim)})
    kept = [d for d in range(dims) if d not in reduced]
    # Rows of the reduced dims, one program each.
    x = input.reshape(input.shape or (1,)).permute(*kept, *reduced).contiguous()
    rows, n = 1, 1
    for size in x.shape[: len(kept)]:
        rows *= size
    for size in x.shape[len(kept) :]:
        n *= size
    out = torch.empty(rows, dtype=input.dtype, device=input.device)
    if rows:
        var_kernel[(rows,)](
            x, out, n, float(max(n - correction, 0)), BLOCK=triton.next_power_of_2(max(n, 1))
        )
    shape = [input.shape[d] for d in kept] if input.dim() else []
    if keepdim and input.dim():
        shape = [1 if d in reduced else input.shape[d] for d in range(dims)]
    return out.reshape(shape)
