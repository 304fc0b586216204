"""Fixtures of the reliability suite: the service tests' databases and live servers, reused.

`heavy` marks the longest tests (SIGKILL restarts, the 200-round race, the HTTP fuzzer, the larger
property runs). They run in CI like every other test; the marker only lets a developer skip them
locally with `-m "not heavy"`.
"""

from __future__ import annotations

import pytest

from tests.server.conftest import (  # noqa: F401 - fixtures, registered by being imported here
    backend,
    database,
    database_url,
    make_settings,
    postgres_database,
    start_server,
)

# The shared oracles live in plain modules: have pytest explain their failed asserts too (the test
# modules import them after this conftest).
pytest.register_assert_rewrite("tests.reliability.support", "tests.reliability.faults")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "heavy: a long reliability test (runs in CI; skip locally with -m 'not heavy')"
    )
