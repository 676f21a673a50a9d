"""The adjust loop's setup now lives in `planner.app.adjust_inputs`; kept here for the
callers that take it from this module."""

from planner.app.adjust_inputs import cron_text as cron_text
from planner.app.adjust_inputs import duration_s as duration_s
from planner.app.adjust_inputs import follow_point_in_force as follow_point_in_force
from planner.app.adjust_inputs import load as load
from planner.app.adjust_inputs import policy_config as policy_config
from planner.app.adjust_inputs import tick_config as tick_config
