# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Honest view op: t is a pure view, exempt from launching a kernel (data/tolerances.yaml
# launch_exempt_ops); its wrapper builds the view with torch.
def t(input):
    return input.t()
