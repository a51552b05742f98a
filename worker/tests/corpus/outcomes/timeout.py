# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# timeout: the wrapper never returns.
def exp(input):
    while True:
        pass
