import os

from hypothesis import HealthCheck, settings

# CI runs a moderate profile; RINGCCL_HYPOTHESIS=thorough for long local runs
settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("RINGCCL_HYPOTHESIS", "ci"))
