"""RP002A learned predictors: B1 (window of eight) and B2 (full history).

Both map observations ``uint8/int64 [B, T]`` (symbols ``0..n_symbols-1``; in the
reference plan 0..3 are the visible state and 4 is an erasure) to logits
``float32 [B, T, n_targets]``; the output at ``t`` depends on observations
``0..t`` only.

* **B1** - causal convolution: one-hot observations, left-padded with
  ``window - 1`` all-zero "no history" columns, ``Conv1d(n_symbols, conv_channels,
  kernel_size=window)``, ReLU, ``Conv1d(conv_channels, hidden_channels, 1)``,
  ReLU, ``Conv1d(hidden_channels, n_targets, 1)``. Position ``t`` sees exactly
  ``t - window + 1 .. t``.
* **B2** - recurrent: one-hot observations, a single-layer GRU with
  ``hidden`` units (``"compiled"``: the C++ kernel of :mod:`prereg.rp002a.gru_kernel`;
  ``"fused"``: :class:`~prereg.rp002a.fused_gru.FusedGRU`; ``"stock"``: ``torch.nn.GRU``;
  all three compute the same function to 1e-6), zero initial state,
  ``Linear(hidden, n_targets)``.

Sizes come from the plan; :func:`build_model` is the only factory a stage should
call. Initialisation is explicit and generator driven
(:func:`initialise_parameters`), so two models built from equal generators have
identical weights, whatever the global torch RNG state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from prereg.rp002a.fused_gru import FusedGRU
from prereg.rp002a.gru_kernel import CompiledGRU  # builds/loads only when instantiated
from prereg.rp002a.specs import (
    SIZE_TYPES,
    B1Sizes,
    B2Sizes,
    ModelSpecError,
    Sizes,
    model_kinds,
    sizes_from_dict,
)

__all__ = [
    "GRU_IMPLEMENTATIONS",
    "B1Sizes",
    "B2Sizes",
    "ModelSpecError",
    "RecurrentPredictor",
    "WindowConvPredictor",
    "build_gru",
    "build_model",
    "initialise_parameters",
    "model_kinds",
    "sizes_from_dict",
]


def _one_hot(observations: Tensor, n_symbols: int) -> Tensor:
    if observations.dim() != 2:
        raise ModelSpecError(
            f"observations must have shape (B, T); got {tuple(observations.shape)}"
        )
    return F.one_hot(observations.long(), n_symbols).to(torch.float32)


class WindowConvPredictor(nn.Module):
    """B1: causal convolution over a window of ``sizes.window`` observations."""

    kind = "B1"

    def __init__(self, sizes: B1Sizes) -> None:
        super().__init__()
        self.sizes = sizes
        self.n_symbols = sizes.n_symbols
        self.n_targets = sizes.n_targets
        self.window_conv = nn.Conv1d(sizes.n_symbols, sizes.conv_channels, sizes.window)
        self.hidden_conv = nn.Conv1d(sizes.conv_channels, sizes.hidden_channels, 1)
        self.output_conv = nn.Conv1d(sizes.hidden_channels, sizes.n_targets, 1)

    def forward(self, observations: Tensor) -> Tensor:
        """Logits ``[B, T, n_targets]`` for observations ``[B, T]``.

        The convolutions are evaluated as matrix multiplies over unfolded windows
        (``[B*T, S*window] @ W.view(C, S*window).T``): the same function as
        ``Conv1d`` on the left-padded input, several times faster on a CPU thread
        than the oneDNN convolution backward.
        """
        x = _one_hot(observations, self.n_symbols).transpose(1, 2)  # [B, S, T]
        batch, steps = observations.shape
        x = F.pad(x, (self.sizes.window - 1, 0))  # zero "no history" before the start
        windows = x.unfold(2, self.sizes.window, 1)  # [B, S, T, window]
        rows = windows.permute(0, 2, 1, 3).reshape(batch * steps, -1)  # [B*T, S*window]
        hidden = torch.relu(F.linear(rows, _as_matrix(self.window_conv), self.window_conv.bias))
        hidden = torch.relu(F.linear(hidden, _as_matrix(self.hidden_conv), self.hidden_conv.bias))
        logits = F.linear(hidden, _as_matrix(self.output_conv), self.output_conv.bias)
        return logits.view(batch, steps, self.n_targets)


def _as_matrix(conv: nn.Conv1d) -> Tensor:
    """Conv1d weight ``[out, in, k]`` as ``[out, in*k]`` (in-major, like unfold)."""
    return conv.weight.reshape(conv.weight.shape[0], -1)


class RecurrentPredictor(nn.Module):
    """B2: GRU over the full history, then a linear read-out."""

    kind = "B2"

    def __init__(self, sizes: B2Sizes, implementation: str) -> None:
        super().__init__()
        self.sizes = sizes
        self.n_symbols = sizes.n_symbols
        self.n_targets = sizes.n_targets
        self.implementation = implementation
        self.gru = build_gru(implementation, sizes.n_symbols, sizes.hidden)
        self.readout = nn.Linear(sizes.hidden, sizes.n_targets)

    def forward(self, observations: Tensor) -> Tensor:
        """Logits ``[B, T, n_targets]`` for observations ``[B, T]``."""
        states, _ = self.gru(_one_hot(observations, self.n_symbols))
        return self.readout(states)


def _stock_gru(input_size: int, hidden_size: int) -> nn.Module:
    return nn.GRU(input_size, hidden_size, batch_first=True)


GRU_IMPLEMENTATIONS: Mapping[str, Callable[[int, int], nn.Module]] = MappingProxyType(
    {"fused": FusedGRU, "stock": _stock_gru, "compiled": CompiledGRU}
)
"""Read-only registry of B2's GRU layer: name -> ``factory(input_size, hidden_size)``.

Every entry is batch-first, takes ``(x, hx=None)``, returns ``(output, h_n)`` and
has ``nn.GRU``'s parameter names, so weights and the explicit initialisation are
interchangeable between them."""


def build_gru(implementation: str, input_size: int, hidden_size: int) -> nn.Module:
    """Instantiate the GRU layer ``implementation``; unknown names are an error.

    A stage never falls back to another implementation.
    """
    factory = GRU_IMPLEMENTATIONS.get(implementation) if isinstance(implementation, str) else None
    if factory is None:
        raise ModelSpecError(
            f"unknown GRU implementation {implementation!r}; available: "
            f"{sorted(GRU_IMPLEMENTATIONS)}. A stage never falls back to another "
            "implementation: fix the plan."
        )
    return factory(input_size, hidden_size)


def initialise_parameters(model: nn.Module, generator: torch.Generator) -> None:
    """Redraw every parameter of ``model`` from ``generator``, in registration order.

    Parameters
    ----------
    model : nn.Module
        A model from :func:`build_model`.
    generator : torch.Generator
        CPU generator (``prereg.base.seeds.torch_generator(...)``); it is advanced.

    Notes
    -----
    Each parameter is drawn ``U(-b, b)`` with PyTorch's default bounds, written out
    so that only ``generator`` matters:

    * GRU (stock or fused) weights and biases: ``b = 1/sqrt(hidden)``
      (``nn.GRU.reset_parameters``);
    * Conv1d / Linear weight and bias: ``b = 1/sqrt(fan_in)``, ``fan_in =
      in_channels * kernel_size`` (``kaiming_uniform_(a=sqrt(5))`` gives
      ``gain * sqrt(3 / fan_in) = 1/sqrt(fan_in)``; the bias rule is the same).

    Modules are visited in ``model.modules()`` order and parameters in
    registration order, so a stock and a fused B2 drawn from equal generators
    hold identical weights.
    """
    if not isinstance(generator, torch.Generator):
        raise ModelSpecError(
            f"generator must be a torch.Generator; got {type(generator).__name__} "
            "(build one with prereg.base.seeds.torch_generator)"
        )
    seen = 0
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.GRU, FusedGRU)):
                bound = 1.0 / math.sqrt(module.hidden_size)
            elif isinstance(module, (nn.Conv1d, nn.Linear)):
                fan_in = module.weight.shape[1] * math.prod(module.weight.shape[2:])
                bound = 1.0 / math.sqrt(fan_in)
            else:
                if next(module.parameters(recurse=False), None) is not None:
                    raise ModelSpecError(
                        f"no initialisation rule for {type(module).__name__}; "
                        "add one to initialise_parameters"
                    )
                continue
            for parameter in module.parameters(recurse=False):
                parameter.uniform_(-bound, bound, generator=generator)
                seen += 1
    if seen != len(list(model.parameters())):
        raise ModelSpecError("initialise_parameters missed parameters of a nested module")


def build_model(
    kind: str,
    sizes: Sizes | Mapping[str, Any],
    implementation: str | None = None,
    *,
    generator: torch.Generator | None = None,
) -> nn.Module:
    """Build B1 or B2 from plan sizes.

    Parameters
    ----------
    kind : {"B1", "B2"}
    sizes : B1Sizes, B2Sizes or mapping
        A mapping is read with :func:`sizes_from_dict` (unknown/missing keys refused).
    implementation : str or None
        B2: a key of :data:`GRU_IMPLEMENTATIONS` (``"compiled"``, ``"fused"``, ``"stock"``),
        required. B1: must be None (it has one implementation).
    generator : torch.Generator or None
        If given, parameters are drawn with :func:`initialise_parameters`;
        otherwise they keep torch's construction-time draw from the global RNG
        (``train`` redraws them from its ``init_generator`` anyway).

    Returns
    -------
    nn.Module
        ``WindowConvPredictor`` or ``RecurrentPredictor`` in float32, train mode.
    """
    if kind not in model_kinds():
        raise ModelSpecError(f"unknown model kind {kind!r}; expected one of {model_kinds()}")
    if isinstance(sizes, Mapping):
        sizes = sizes_from_dict(kind, sizes)
    if not isinstance(sizes, SIZE_TYPES[kind]):
        raise ModelSpecError(
            f"{kind} needs {SIZE_TYPES[kind].__name__}; got {type(sizes).__name__}"
        )
    if kind == "B1":
        if implementation is not None:
            raise ModelSpecError(
                f"B1 has a single implementation; got implementation={implementation!r}, pass None"
            )
        model: nn.Module = WindowConvPredictor(sizes)  # type: ignore[arg-type]
    else:
        if implementation is None:
            raise ModelSpecError(
                f"B2 needs implementation= one of {sorted(GRU_IMPLEMENTATIONS)} (named in the plan)"
            )
        model = RecurrentPredictor(sizes, implementation)  # type: ignore[arg-type]
    if generator is not None:
        initialise_parameters(model, generator)
    return model
