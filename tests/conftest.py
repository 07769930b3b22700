"""Test-wide settings: hypothesis without per-example deadlines.

Timing is for benchmarks, not tests: on a loaded 2-core CI machine an example that
usually takes 50 ms can take 500, and that says nothing about correctness.
"""

from hypothesis import HealthCheck, settings

settings.register_profile("project", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("project")
