"""The LLM replay server: recorded chat completions over the OpenAI HTTP API (see .server).

A package of its own so that the daemon's tests and demo can run it without the device worker's
dependencies (torch, triton) and the worker never imports it.
"""
