# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Written by the opforge developers (tests/test_harness_wrong.py): the honest twin of
# wrong/softmax.no_max_subtraction.py, which fixes exactly its defect.
# Fix: exp(x - max(x)), which never exceeds 1, over its sum.
# Claims: float32
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + row * n + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n + offsets, e / tl.sum(e, axis=0), mask=mask)


def softmax(input, dim, dtype=None):
    # Rows along dim, one program each.
    x = input.reshape(input.shape or (1,)).movedim(dim, -1).contiguous()
    out = torch.empty_like(x)
    n = x.shape[-1]
    if x.numel():
        softmax_kernel[(x.numel() // n,)](x, out, n, BLOCK=triton.next_power_of_2(n))
    return out.movedim(-1, dim).contiguous().reshape(input.shape)
