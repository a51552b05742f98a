# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Dereferences NULL through ctypes.
import ctypes


def exp(input):
    ctypes.string_at(0, 16)
    return input
