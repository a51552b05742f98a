# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Asks for a terabyte.
def exp(input):
    block = torch.empty(1 << 40, dtype=torch.uint8, device=input.device)
    block.fill_(1)
    return input
