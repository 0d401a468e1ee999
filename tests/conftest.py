"""Shared pytest configuration.

Hypothesis profiles: ``ci`` (derandomized, bounded examples, no deadline, so a slow CI core
never turns into a flaky failure) and ``thorough`` (1000 random examples per test; a failure
prints the blob that reproduces it). Select with ``HYPOTHESIS_PROFILE=thorough`` (``make
test-thorough`` runs the spec that way); the default is ``ci``.
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
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
