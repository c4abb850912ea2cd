"""Seeded synthetic data and the two models (numpy only, deterministic given the generator)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prereg_paired_models.settings import Settings


@dataclass(frozen=True)
class Replicate:
    """One dataset replicate: training and test points drawn from one generator."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def draw(settings: Settings, rng: np.random.Generator) -> Replicate:
    """Features standard normal; y = amplitude * sum_j sin(frequency * x_j) + noise_sd * e.

    The draws happen in one fixed order (features, then noise, training points first), so
    the generator built from the replicate's seed always gives the same replicate."""
    data = settings.data
    n = data.n_train + data.n_test
    x = rng.standard_normal((n, data.n_features))
    noise = rng.standard_normal(n)
    y = data.amplitude * np.sin(data.frequency * x).sum(axis=1) + data.noise_sd * noise
    cut = data.n_train
    return Replicate(x[:cut], y[:cut], x[cut:], y[cut:])


def ridge_predict(data: Replicate, penalty: float) -> np.ndarray:
    """Ridge regression with an unpenalised intercept: centre, solve (X'X + penalty I) b = X'y."""
    x_mean, y_mean = data.x_train.mean(axis=0), data.y_train.mean()
    x = data.x_train - x_mean
    gram = x.T @ x + penalty * np.eye(x.shape[1])
    beta = np.linalg.solve(gram, x.T @ (data.y_train - y_mean))
    return (data.x_test - x_mean) @ beta + y_mean


def knn_predict(data: Replicate, neighbours: int) -> np.ndarray:
    """The mean training response of the ``neighbours`` nearest training points (Euclidean;
    ties broken by training index, through a stable sort)."""
    distances = ((data.x_test[:, None, :] - data.x_train[None, :, :]) ** 2).sum(axis=2)
    nearest = np.argsort(distances, axis=1, kind="stable")[:, :neighbours]
    return data.y_train[nearest].mean(axis=1)


def mean_squared_error(y: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean((y - predicted) ** 2))
