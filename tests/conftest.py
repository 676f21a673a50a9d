"""Test-wide settings: property tests draw the same examples on every run (a fixed seed)."""

from hypothesis import settings

settings.register_profile("planner", derandomize=True, print_blob=True)
settings.load_profile("planner")
