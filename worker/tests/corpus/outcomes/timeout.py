# timeout: the wrapper never returns.
def exp(input):
    while True:
        pass
