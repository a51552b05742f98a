# Ends the process from inside the wrapper.
import os


def exp(input):
    os._exit(3)
