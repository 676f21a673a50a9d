"""Base model of every input schema: unknown keys are rejected, fields carry docs and ranges."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A schema object: unknown keys are errors, values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
