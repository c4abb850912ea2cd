"""The plan's numbers for the learned models: their sizes (:func:`sizes_from_dict`) and the
training procedure (:class:`TrainConfig`).

Apart from :mod:`prereg.rp002a.models` and :mod:`prereg.rp002a.training`, which import
torch: validating a plan (at approval, at the gate, in the audit and the report) reads
these numbers and needs no torch."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Union

__all__ = [
    "SIZE_TYPES",
    "B1Sizes",
    "B2Sizes",
    "ModelSpecError",
    "Sizes",
    "TrainConfig",
    "TrainConfigError",
    "model_kinds",
    "sizes_from_dict",
]


class TrainConfigError(ValueError):
    """A training configuration key or value is invalid."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The training procedure's numbers; every field comes from the plan (no defaults).

    Reference values (RP002A "Fresh target-size variance stage" and DESIGN.md)
    are in brackets.
    """

    learning_rate: float  # Adam step size [1e-3]
    adam_beta1: float  # Adam first-moment decay [0.9, torch default]
    adam_beta2: float  # Adam second-moment decay [0.999, torch default]
    adam_eps: float  # Adam denominator epsilon [1e-8, torch default]
    batch_size: int  # training episodes per optimiser step [32]
    grad_clip_norm: float  # max global L2 norm of all gradients, clip_grad_norm_ [1.0]
    probability_clip: float  # loss = -log(max(p_target, clip)) [1e-8]
    max_epochs: int  # epoch cap [300]
    patience: int  # stop after this many epochs without a new validation minimum [20]
    final_20_window: int  # "final-20" flag: selected epoch among the last this-many run [20]
    final_five_window: int  # "final-five" flag: selected epoch among the last this-many [5]

    def __post_init__(self) -> None:
        for name in (
            "batch_size",
            "max_epochs",
            "patience",
            "final_20_window",
            "final_five_window",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TrainConfigError(f"TrainConfig.{name} must be a positive int; got {value!r}")
        for name in ("learning_rate", "adam_eps", "grad_clip_norm"):
            value = getattr(self, name)
            if not _is_real(value) or not (0.0 < value < math.inf):
                raise TrainConfigError(
                    f"TrainConfig.{name} must be a finite float > 0; got {value!r}"
                )
        for name in ("adam_beta1", "adam_beta2"):
            value = getattr(self, name)
            if not _is_real(value) or not (0.0 <= value < 1.0):
                raise TrainConfigError(f"TrainConfig.{name} must be in [0, 1); got {value!r}")
        clip = self.probability_clip
        if not _is_real(clip) or not (0.0 < clip < 1.0):
            raise TrainConfigError(f"TrainConfig.probability_clip must be in (0, 1); got {clip!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> TrainConfig:
        """Build from a plan mapping; unknown or missing keys are refused by name."""
        if not isinstance(values, Mapping):
            raise TrainConfigError(
                f"training config must be a mapping; got {type(values).__name__}"
            )
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise TrainConfigError(f"unknown training config key(s) {unknown}; allowed: {names}")
        missing = [n for n in names if n not in values]
        if missing:
            raise TrainConfigError(
                f"missing training config key(s) {missing}; the plan must state every value"
            )
        return cls(**{n: values[n] for n in names})

    def to_dict(self) -> dict[str, Any]:
        """Field name -> value, in declaration order (for manifests)."""
        return dataclasses.asdict(self)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class ModelSpecError(ValueError):
    """A model kind, size or implementation name is unknown or invalid."""


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelSpecError(f"{name} must be a positive int; got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class B1Sizes:
    """Sizes of B1 (plan values in brackets).

    Attributes
    ----------
    n_symbols : int
        Observation alphabet, one-hot width [5: four states + erasure].
    n_targets : int
        Output classes [4].
    window : int
        Convolution kernel = observations seen, current included [8].
    conv_channels : int
        Channels of the causal convolution [64].
    hidden_channels : int
        Channels of the 1x1 hidden convolution [64].
    """

    n_symbols: int
    n_targets: int
    window: int
    conv_channels: int
    hidden_channels: int

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            _positive_int(f"B1 sizes.{field.name}", getattr(self, field.name))


@dataclasses.dataclass(frozen=True)
class B2Sizes:
    """Sizes of B2 (plan values in brackets).

    Attributes
    ----------
    n_symbols : int
        Observation alphabet, one-hot width [5].
    n_targets : int
        Output classes [4].
    hidden : int
        GRU hidden units [64].
    """

    n_symbols: int
    n_targets: int
    hidden: int

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            _positive_int(f"B2 sizes.{field.name}", getattr(self, field.name))


Sizes = Union[B1Sizes, B2Sizes]
SIZE_TYPES: Mapping[str, type] = MappingProxyType({"B1": B1Sizes, "B2": B2Sizes})
"""Model kind -> its sizes class, read-only."""


def sizes_from_dict(kind: str, values: Mapping[str, Any]) -> Sizes:
    """Build the sizes dataclass of ``kind`` from a plan mapping.

    Unknown and missing keys are refused by name (no defaults: every size is a
    plan number).
    """
    size_type = SIZE_TYPES.get(kind)
    if size_type is None:
        raise ModelSpecError(f"unknown model kind {kind!r}; expected one of {model_kinds()}")
    if not isinstance(values, Mapping):
        raise ModelSpecError(f"{kind} sizes must be a mapping; got {type(values).__name__}")
    names = [f.name for f in dataclasses.fields(size_type)]
    unknown = sorted(set(values) - set(names))
    missing = [n for n in names if n not in values]
    if unknown:
        raise ModelSpecError(f"unknown {kind} size key(s) {unknown}; allowed keys are {names}")
    if missing:
        raise ModelSpecError(f"missing {kind} size key(s) {missing}; the plan must give them")
    return size_type(**{n: values[n] for n in names})


def model_kinds() -> tuple[str, ...]:
    """Model kinds :func:`build_model` knows: ``("B1", "B2")``."""
    return tuple(SIZE_TYPES)
