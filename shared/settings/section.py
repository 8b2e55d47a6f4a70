"""The base of every settings section: frozen, and unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__: list[str] = []  # ``_Section`` is shared by the sibling modules only


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
