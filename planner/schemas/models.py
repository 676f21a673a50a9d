"""models.yaml: the models agents call and the variants each may run as."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from planner.catalog.models import ModelArch, resolve_arch
from planner.schemas.common import Strict

Quantization = Literal["bf16", "fp16", "fp8", "awq", "gptq", "int4", "mxfp4", "nvfp4"]


class Variant(Strict):
    """One checkpoint of a model in one precision."""

    name: str = Field(min_length=1, description="variant name, unique within the model")
    quantization: Quantization = Field(description="weight precision")
    path: str = Field(default="", description="checkpoint dir or hub id passed to vLLM")
    quality_penalty: float = Field(
        default=0.0, ge=0, le=1, description="quality lost against the best variant, 0..1"
    )


class ModelEntry(Strict):
    """One model agents call by `name`."""

    name: str = Field(min_length=1, description="what agents send as `model`")
    architecture: str | ModelArch = Field(
        description="catalog name, path to a HF config.json, or inline numbers"
    )
    variants: list[Variant] = Field(min_length=1, description="precisions it may run in")
    max_context: int = Field(
        default=32768, ge=16, le=2_097_152, description="longest context, tokens"
    )
    priority: int = Field(default=1, ge=0, le=100, description="higher: served first when short")
    _arch: ModelArch | None = PrivateAttr(default=None)
    _base_dir: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _unique_variants(self) -> ModelEntry:
        names = [v.name for v in self.variants]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate variant names in model {self.name!r}: {dup}")
        return self

    @property
    def arch(self) -> ModelArch:
        """The resolved architecture (config.json paths relative to the models file)."""
        if self._arch is None:
            self._arch = resolve_arch(self.architecture, base_dir=self._base_dir)
        return self._arch

    def variant(self, name: str) -> Variant:
        """The variant called `name` (KeyError if absent)."""
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)


class Models(Strict):
    """kind: models."""

    kind: Literal["models"] = "models"
    version: Literal[1] = 1
    models: list[ModelEntry] = Field(min_length=1, description="the model catalog")

    @field_validator("models")
    @classmethod
    def _unique_names(cls, v: list[ModelEntry]) -> list[ModelEntry]:
        names = [m.name for m in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate model names: {dup}; each model name must be unique")
        return v

    def model(self, name: str) -> ModelEntry:
        """The model called `name` (KeyError if absent)."""
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        """Model names in file order."""
        return [m.name for m in self.models]
