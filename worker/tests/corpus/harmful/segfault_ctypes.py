# Dereferences NULL through ctypes.
import ctypes


def exp(input):
    ctypes.string_at(0, 16)
    return input
