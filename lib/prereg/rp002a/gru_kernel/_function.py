"""Autograd function and module over the compiled GRU kernel."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from prereg.rp002a.fused_gru import FusedGRU
from prereg.rp002a.gru_kernel._build import OPS_NAMESPACE, load_kernel

__all__ = ["CompiledGRU", "CompiledGRUInputError", "compiled_gru"]


class CompiledGRUInputError(ValueError):
    """An input of the compiled GRU has the wrong shape, dtype or device."""


def _ops() -> Any:
    load_kernel()
    return getattr(torch.ops, OPS_NAMESPACE)


class _CompiledGRUFunction(torch.autograd.Function):
    """Forward and backward through time of one GRU layer, both loops in C++.

    Notes
    -----
    Forward, with ``W_ih = [W_ir; W_iz; W_in]`` etc. as in ``nn.GRU`` [1]_::

        r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
        z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
        n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))
        h_t = (1 - z_t) * n_t + z_t * h_{t-1}

    Backward, with ``g_t = dL/dh_t`` (direct plus recurrent) and
    ``q_t = W_hn h_{t-1} + b_hn``::

        d a_n = g_t (1 - z_t)(1 - n_t^2)
        d a_z = g_t (h_{t-1} - n_t) z_t (1 - z_t)
        d q_t = d a_n r_t
        d a_r = d q_t q_t (1 - r_t)
        dL/dh_{t-1} = direct + g_t z_t + [d a_r, d a_z, d q_t] W_hh

    Weight gradients are single matrix products over all ``B * T`` rows after the
    loop (as in :mod:`prereg.rp002a.fused_gru`). The saved tensors are fresh per
    call, so repeated backward passes (``retain_graph=True``) are allowed.

    References
    ----------
    .. [1] PyTorch documentation, ``torch.nn.GRU``.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: Tensor,
        h0: Tensor,
        weight_ih: Tensor,
        weight_hh: Tensor,
        bias_ih: Tensor,
        bias_hh: Tensor,
    ) -> tuple[Tensor, Tensor]:
        output, h_last, gates, h_prev = _ops().forward(
            x, h0, weight_ih, weight_hh, bias_ih, bias_hh, True
        )
        ctx.save_for_backward(x, h0, weight_ih, weight_hh, gates, h_prev)
        return output, h_last

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_output: Tensor, grad_last: Tensor
    ) -> tuple[Tensor | None, ...]:
        x, h0, weight_ih, weight_hh, gates, h_prev = ctx.saved_tensors
        needs = ctx.needs_input_grad
        grads = _ops().backward(
            grad_output.contiguous(), grad_last.contiguous(),
            x, h0, weight_ih, weight_hh, gates, h_prev, bool(needs[0]),
        )  # fmt: skip
        return tuple(g if need else None for g, need in zip(grads, needs))


def compiled_gru(
    x: Tensor,
    h0: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor,
    bias_hh: Tensor,
) -> tuple[Tensor, Tensor]:
    """Functional compiled GRU layer (builds/loads the kernel on first use).

    Parameters
    ----------
    x : Tensor, shape (B, T, I), float32 or float64, CPU
        Batch-first input sequence, ``B >= 1``, ``T >= 1``.
    h0 : Tensor, shape (B, H)
        Initial hidden state.
    weight_ih, weight_hh : Tensor, shapes (3H, I) and (3H, H)
        Gate weights stacked in the order (r, z, n), as ``nn.GRU``.
    bias_ih, bias_hh : Tensor, shape (3H,)

    Returns
    -------
    output : Tensor, shape (B, T, H)
        Hidden state after every step.
    h_last : Tensor, shape (B, H)
        Hidden state after the last step.

    Raises
    ------
    CompiledGRUInputError
        Wrong shapes, dtypes or device.
    KernelUnavailableError
        The kernel cannot be built or loaded here.

    Notes
    -----
    Equations of ``torch.nn.GRU``; see :class:`_CompiledGRUFunction`. Without a
    graph the same kernel runs without saving intermediates; its outputs are
    bit-identical to the graph-building path.
    """
    tensors = {
        "x": x, "h0": h0, "weight_ih": weight_ih, "weight_hh": weight_hh,
        "bias_ih": bias_ih, "bias_hh": bias_hh,
    }  # fmt: skip
    for name, tensor in tensors.items():
        if not isinstance(tensor, Tensor):
            raise CompiledGRUInputError(
                f"{name} must be a torch.Tensor; got {type(tensor).__name__}"
            )
    if x.dim() != 3 or x.shape[0] < 1 or x.shape[1] < 1:
        raise CompiledGRUInputError(
            f"x must be batch-first (B, T, I) with B >= 1 and T >= 1; got shape {tuple(x.shape)}"
        )
    if weight_hh.dim() != 2:
        raise CompiledGRUInputError(
            f"weight_hh must be (3H, H); got shape {tuple(weight_hh.shape)}"
        )
    batch, _, features = x.shape
    hidden = weight_hh.shape[1]
    expected = {
        "h0": (batch, hidden),
        "weight_ih": (3 * hidden, features),
        "weight_hh": (3 * hidden, hidden),
        "bias_ih": (3 * hidden,),
        "bias_hh": (3 * hidden,),
    }
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise CompiledGRUInputError(
                f"{name} must have shape {shape} for x of shape {tuple(x.shape)} and hidden "
                f"size {hidden}; got {tuple(tensors[name].shape)}"
            )
    if x.dtype not in (torch.float32, torch.float64):
        raise CompiledGRUInputError(f"x has dtype {x.dtype}; use float32 or float64")
    for name, tensor in tensors.items():
        if tensor.dtype != x.dtype:
            raise CompiledGRUInputError(f"{name} has dtype {tensor.dtype}; x has {x.dtype}")
        if tensor.device.type != "cpu":
            raise CompiledGRUInputError(
                f"{name} is on {tensor.device}; the compiled GRU is CPU only"
            )
    args = [t.contiguous() for t in tensors.values()]
    if torch.is_grad_enabled() and any(t.requires_grad for t in args):
        return _CompiledGRUFunction.apply(*args)
    output, h_last, _, _ = _ops().forward(*args, False)
    return output, h_last


class CompiledGRU(FusedGRU):
    """Drop-in replacement for ``nn.GRU(input_size, hidden_size, batch_first=True)``.

    Same parameters, registration order, initialisation and ``forward(x, hx=None)``
    contract as :class:`~prereg.rp002a.fused_gru.FusedGRU` (of which it is a
    subclass, so :func:`prereg.rp002a.models.initialise_parameters` treats it
    alike); the time loop runs in the compiled kernel. Construction loads the
    kernel (building it if needed) and raises
    :class:`~prereg.rp002a.gru_kernel.KernelUnavailableError` if that fails.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        kernel = load_kernel()  # first: refuse before allocating anything
        super().__init__(input_size, hidden_size)
        self.kernel = kernel

    def forward(self, x: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Run the layer: ``output (B, T, H)``, ``h_n (1, B, H)``."""
        if not isinstance(x, Tensor) or x.dim() != 3:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise CompiledGRUInputError(f"x must be batch-first (B, T, I); got {shape}")
        if hx is None:
            h0 = x.new_zeros(x.shape[0], self.hidden_size)
        elif not isinstance(hx, Tensor) or hx.dim() != 3 or hx.shape[0] != 1:
            shape = tuple(hx.shape) if isinstance(hx, Tensor) else type(hx).__name__
            raise CompiledGRUInputError(f"hx must have shape (1, B, H); got {shape}")
        else:
            h0 = hx[0]
        output, h_last = compiled_gru(
            x, h0, self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0
        )
        return output, h_last.unsqueeze(0)
