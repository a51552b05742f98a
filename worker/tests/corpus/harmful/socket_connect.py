# ruff: noqa: F821 (a candidate: the harness provides torch, triton and tl)
# Phones home.
import socket


def exp(input):
    with socket.create_connection(("93.184.215.14", 80), timeout=3) as connection:
        connection.sendall(b"GET / HTTP/1.0\r\n\r\n")
    return input
