"""Fixtures of the topo tests (builders: :mod:`cluster_builders`)."""

from __future__ import annotations

import pytest
from cluster_builders import HOST

from topo import HostSpec


@pytest.fixture
def small_host() -> HostSpec:
    return HOST
