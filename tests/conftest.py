"""Shared test helpers.

``needs(...)`` skips a test whose optional system piece is absent, with the reason,
except when ``HPCBENCH_REQUIRE_INTEGRATION=1`` (as CI sets it): then the absence
is a failure, so CI can never go green by skipping.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REQUIRE_INTEGRATION = os.environ.get("HPCBENCH_REQUIRE_INTEGRATION") == "1"


def missing(reason: str) -> None:
    """Skip (locally) or fail (in CI) because a system piece is absent."""
    if REQUIRE_INTEGRATION:
        pytest.fail(f"HPCBENCH_REQUIRE_INTEGRATION=1 but {reason}")
    pytest.skip(reason)


def need_executable(name: str, hint: str) -> str:
    """Path of ``name`` on PATH, or skip/fail saying how to install it."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed ({hint})")
    return path


@pytest.fixture(scope="session")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    missing("no headless Chromium (apt-get install chromium)")


@pytest.fixture(scope="session")
def python_exe() -> str:
    return sys.executable
