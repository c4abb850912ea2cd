"""The stage's parameters, parsed once into frozen typed settings (errors name the field)."""

from __future__ import annotations

from dataclasses import dataclass

from prereg import api
from prereg.api import SettingsError


@dataclass(frozen=True)
class Data:
    n_train: int = api.bounded(minimum=1)  # training points per replicate
    n_test: int = api.bounded(minimum=1)  # test points (the loss is their mean squared error)
    n_features: int = api.bounded(minimum=1)  # standard normal features
    noise_sd: float = api.bounded(minimum=0)  # SD of the Gaussian noise added to the signal
    amplitude: float  # signal: amplitude * sum_j sin(frequency * x_j)
    frequency: float


@dataclass(frozen=True)
class Ridge:
    penalty: float = api.bounded(minimum=0)  # the L2 penalty on the centred fit


@dataclass(frozen=True)
class Knn:
    neighbours: int = api.bounded(minimum=1)  # k (at most n_train)


@dataclass(frozen=True)
class Analysis:
    confidence: float = api.bounded(above=0, below=1)  # of the two-sided paired t interval


@dataclass(frozen=True)
class Settings(api.StageSettings):
    """One stage of kind ``paired-models.compare``, as its plan entry states it."""

    replicates: int = api.bounded(minimum=2)  # one item each (the interval needs an SD)
    data: Data
    ridge: Ridge
    knn: Knn
    analysis: Analysis

    def __post_init__(self) -> None:
        if self.knn.neighbours > self.data.n_train:
            raise ValueError(
                f"knn.neighbours ({self.knn.neighbours}) exceeds data.n_train ({self.data.n_train})"
            )

    @property
    def neighbours(self) -> int:
        return self.knn.neighbours


parse_settings = api.settings_parser(Settings)
FIELDS = api.field_tree(Settings)  # every field the stage's "parameters" hold, by section
__all__ = ["FIELDS", "Settings", "SettingsError", "parse_settings"]
