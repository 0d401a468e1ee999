"""Shared pytest configuration.

Hypothesis profiles: ``ci`` (derandomized, bounded examples, no deadline, so a slow CI core
never turns into a flaky failure) and ``thorough`` (many more examples, random). Select with
``HYPOTHESIS_PROFILE=thorough``; the default is ``ci``.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
