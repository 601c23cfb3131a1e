"""Shared test settings: hypothesis profiles (CI runs the default, PARASTRAT_THOROUGH=1 more)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# fixtures for checks on torch's fake process group and torchtitan's source
from .torchtitan_source import fake_world, parallel_dims  # noqa: F401

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=20000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.load_profile("thorough" if os.environ.get("PARASTRAT_THOROUGH") else "default")
