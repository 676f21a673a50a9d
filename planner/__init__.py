"""planner: place, tier and switch a small team's LLMs across a small mixed GPU cluster."""

__version__ = "0.1.0"
