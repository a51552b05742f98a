# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Starts threads until the process limit stops it.
import threading
import time


def exp(input):
    while True:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
