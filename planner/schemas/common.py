"""Base model of every input schema: unknown keys are rejected, fields carry docs and ranges."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

_Key = TypeVar("_Key", bound="SupportsRichComparison")  # names, ids, (node, port) pairs

# Names that end up in file names (server logs), process arguments and Ray actor names:
# no path separators, no leading dot or dash, no spaces.
SAFE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
SafeName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=SAFE_NAME_PATTERN)
]


class Strict(BaseModel):
    """A schema object: unknown keys are errors, values are validated on assignment too, and
    numbers are finite (an .inf or .nan in a file is a typo that would poison every formula)."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False
    )


def duplicates(names: Iterable[_Key]) -> list[_Key]:
    """Names that occur more than once, sorted (one pass: large files stay fast)."""
    return sorted(n for n, c in Counter(names).items() if c > 1)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest known name, or ''."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
