"""Shared test set-up: hypothesis profiles and small helpers.

Profiles (choose with HYPOTHESIS_PROFILE): ``dev`` (fast, the default),
``ci`` (derandomized, used by .ci/run), ``nightly`` (many examples).
"""

import os

from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("nightly", max_examples=2000, deadline=None, suppress_health_check=_SLOW_OK, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
