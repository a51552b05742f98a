"""Fixtures shared by the worker's test suites."""

import pytest
from fake_daemon import FakeDaemon


@pytest.fixture
def daemon():
    """A ROUTER bound on a loopback port, playing the daemon for one test."""
    fake = FakeDaemon()
    yield fake
    fake.close()
