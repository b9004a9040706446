"""Shared fixtures for the unit tests."""
import logging

import pytest

import tapejax


@pytest.fixture
def fresh_cache():
    """An empty compiled-replay cache with zeroed counters."""
    tapejax.clear_cache()
    yield
    tapejax.clear_cache()


@pytest.fixture
def tapejax_log(caplog):
    caplog.set_level(logging.WARNING, logger="tapejax")
    return caplog
