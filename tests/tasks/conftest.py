"""Fixtures of the task tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.tasks.fake_sandbox_service import FakeSandboxFusion


@pytest.fixture()
def service() -> Iterator[FakeSandboxFusion]:
    """A fresh local SandboxFusion stand-in, shut down after the test."""
    fake = FakeSandboxFusion()
    yield fake
    fake.close()
