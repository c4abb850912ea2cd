"""A single-layer, batch-first GRU with a hand-written backward through time.

Same equations, gate order ``(r, z, n)``, parameter names/shapes and
initialisation as :class:`torch.nn.GRU` (one layer, ``batch_first=True``,
``bias=True``), but faster on one CPU thread:

* the input projections of all time steps are one matrix multiply;
* a forward step is one in-place ``addmm`` for the hidden path and five
  elementwise kernels (both sigmoids of r and z at once; ``tanh`` as
  ``2 sigmoid(2a) - 1``; the update as one ``lerp``);
* a backward step is one ``addmm`` and two elementwise kernels: every factor
  multiplying dL/dh_t is computed for all steps at once after the forward, and
  the weight gradients are single matrix multiplies over all ``B * T`` rows;
* the buffers of a pass (and their per-step views) are allocated once per shape
  and reused (:class:`WorkspacePool`); without a graph (``no_grad``) a lean
  path with small scratch buffers computes bit-identical outputs.

Measured with ``benchmarks/bench_training.py`` (see its docstring); the speed-up
comes from avoiding autograd's per-step graph and fresh allocations, not from
different arithmetic: outputs and gradients equal ``nn.GRU``'s to about 1e-7.

The state dicts of :class:`FusedGRU` and ``nn.GRU(batch_first=True)`` are
interchangeable (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``,
``bias_hh_l0``).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["FusedGRU", "FusedGRUInputError", "WorkspacePool", "fused_gru"]


class FusedGRUInputError(ValueError):
    """An input of the fused GRU has the wrong shape, dtype or device."""


class _Workspace:
    """Every buffer of one forward/backward pass of shape (T, B, H), with its views.

    Allocated once per shape and reused (see :class:`WorkspacePool`): fresh
    multi-megabyte buffers on every batch cost page faults and view creation that
    are a large share of a step at H = 64. Every buffer is fully overwritten
    before it is read, so reuse cannot change a result.
    """

    def __init__(self, steps: int, batch: int, hidden: int, dtype: torch.dtype) -> None:
        self.key = (steps, batch, hidden, dtype)
        two_h = 2 * hidden

        def empty(*shape: int) -> Tensor:
            return torch.empty(*shape, dtype=dtype)

        # the per-step addend, turned in place into [a_r, a_z, q] by the forward
        self.step_addend = empty(steps, batch, 3 * hidden)
        self.gi_n_twice = empty(steps, batch, hidden)
        self.minus_one = torch.full((batch, hidden), -1.0, dtype=dtype)
        self.rz = empty(steps, batch, two_h)
        self.new = empty(steps, batch, hidden)
        self.hs = empty(steps, batch, hidden)
        self.forward_views = list(
            zip(
                self.step_addend.unbind(0),
                self.gi_n_twice.unbind(0),
                self.hs.unbind(0),
                self.step_addend[:, :, :two_h].unbind(0),
                self.step_addend[:, :, two_h:].unbind(0),
                self.rz.unbind(0),
                self.rz[:, :, :hidden].unbind(0),
                self.rz[:, :, hidden:].unbind(0),
                self.new.unbind(0),
            )
        )
        # backward
        self.h_prev = empty(steps, batch, hidden)
        self.one_minus_z = empty(steps, batch, hidden)
        self.d_tanh = empty(steps, batch, hidden)
        self.coeff = empty(steps, 3, batch, hidden)  # gate-major: g_t broadcasts
        self.g_all = empty(steps, batch, hidden)
        self.d_hidden = empty(steps, batch, 3, hidden)
        self.d_input = empty(steps * batch, 3 * hidden)
        self.backward_views = list(
            zip(
                self.g_all.unbind(0),
                self.coeff.unbind(0),
                self.d_hidden.permute(0, 2, 1, 3).unbind(0),  # [3, B, H] views
                self.d_hidden.view(steps, batch, 3 * hidden).unbind(0),
                self.rz[:, :, hidden:].unbind(0),
            )
        )


class WorkspacePool:
    """Free workspaces by shape, owned by one :class:`FusedGRU` module.

    A workspace is taken by a forward pass that builds a graph and given back at
    the end of its backward pass. A graph dropped without backward simply lets
    its workspace be garbage-collected; a second forward before the backward
    takes (or allocates) another workspace, so buffers are never shared.
    """

    def __init__(self) -> None:
        self._free: dict[tuple[int, int, int, torch.dtype], list[_Workspace]] = {}

    def acquire(self, steps: int, batch: int, hidden: int, dtype: torch.dtype) -> _Workspace:
        free = self._free.get((steps, batch, hidden, dtype))
        return free.pop() if free else _Workspace(steps, batch, hidden, dtype)

    def release(self, workspace: _Workspace) -> None:
        self._free.setdefault(workspace.key, []).append(workspace)


def _recurrence(
    ws: _Workspace | None,
    x_rows: Tensor,
    steps: int,
    h0: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor,
    bias_hh: Tensor,
) -> Tensor:
    """Forward loop; returns ``hs [T, B, H]``.

    With a workspace every intermediate the backward needs is kept in it; with
    ``ws=None`` (no graph) the per-step intermediates share one small scratch
    buffer each. The arithmetic, and hence every bit of ``hs``, is the same.
    """
    batch, hidden = h0.shape
    two_h = 2 * hidden
    dtype = x_rows.dtype
    # Input projection for all steps, then turned in place into the per-step
    # addend [W_ir x + b_ir + b_hr, W_iz x + b_iz + b_hz, b_hn]; the input part of
    # n is kept apart (doubled) because r multiplies only the hidden part of n.
    if ws is None:
        step_addend = torch.addmm(bias_ih, x_rows, weight_ih.t()).view(steps, batch, 3 * hidden)
        gi_n_twice = torch.mul(step_addend[:, :, two_h:], 2.0)
        minus_one = torch.full((batch, hidden), -1.0, dtype=dtype)
        hs = torch.empty(steps, batch, hidden, dtype=dtype)
        rz_s = torch.empty(batch, two_h, dtype=dtype)
        new_s = torch.empty(batch, hidden, dtype=dtype)
        scratch = (rz_s, rz_s[:, :hidden], rz_s[:, hidden:], new_s)
        views: Any = zip(
            step_addend.unbind(0),
            gi_n_twice.unbind(0),
            hs.unbind(0),
            step_addend[:, :, :two_h].unbind(0),
            step_addend[:, :, two_h:].unbind(0),
            *(itertools.repeat(view, steps) for view in scratch),
        )
    else:
        step_addend, gi_n_twice, minus_one, hs = ws.step_addend, ws.gi_n_twice, ws.minus_one, ws.hs
        torch.addmm(bias_ih, x_rows, weight_ih.t(), out=step_addend.view(steps * batch, 3 * hidden))
        torch.mul(step_addend[:, :, two_h:], 2.0, out=gi_n_twice)
        views = ws.forward_views
    step_addend[:, :, :two_h] += bias_hh[:two_h]
    step_addend[:, :, two_h:] = bias_hh[two_h:]
    weight_hh_t = weight_hh.t()
    h = h0
    for pre_t, gin2, h_out, pre_rz, q, rz_t, r, z, n in views:
        pre_t.addmm_(h, weight_hh_t)  # in place: addend + h W_hh^T = [a_r, a_z, q]
        torch.sigmoid(pre_rz, out=rz_t)
        # n = tanh(a) = 2 sigmoid(2a) - 1: sigmoid + add beat tanh's CPU kernel
        torch.addcmul(gin2, r, q, value=2.0, out=n)
        n.sigmoid_()
        torch.add(minus_one, n, alpha=2.0, out=n)
        h = torch.lerp(n, h, z, out=h_out)
    return hs


class _FusedGRUFunction(torch.autograd.Function):
    """Forward and backward through time of one GRU layer (time-major inside).

    Notes
    -----
    Forward, with ``W_ih = [W_ir; W_iz; W_in]`` etc. as in ``nn.GRU``::

        r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
        z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
        n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))
        h_t = (1 - z_t) * n_t + z_t * h_{t-1}

    Backward, with ``g_t = dL/dh_t`` (direct plus recurrent),
    ``q_t = W_hn h_{t-1} + b_hn``::

        d a_z = g_t * (h_{t-1} - n_t) * z_t (1 - z_t)
        d a_n = g_t * (1 - z_t) * (1 - n_t^2)
        d a_r = d a_n * q_t * r_t (1 - r_t)
        d q_t = d a_n * r_t
        dL/dh_{t-1} = dL/dh_{t-1}|direct + g_t * z_t + [d a_r, d a_z, d q_t] W_hh

    Every factor multiplying ``g_t`` is known after the forward pass, so it is
    computed for all steps at once; the loop then does one broadcast multiply,
    one ``addmm`` and one ``addcmul`` per step. Weight gradients are single
    matrix multiplies over all ``B * T`` rows after the loop.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        pool: WorkspacePool | None,
        x: Tensor,
        h0: Tensor,
        weight_ih: Tensor,
        weight_hh: Tensor,
        bias_ih: Tensor,
        bias_hh: Tensor,
    ) -> tuple[Tensor, Tensor]:
        batch, steps, features = x.shape
        # pool None: a private workspace, kept for repeated backward passes
        ws = (pool if pool is not None else WorkspacePool()).acquire(
            steps, batch, weight_hh.shape[1], x.dtype
        )
        x_rows = x.transpose(0, 1).reshape(steps * batch, features)  # time-major rows
        hs = _recurrence(ws, x_rows, steps, h0, weight_ih, weight_hh, bias_ih, bias_hh)
        ctx.save_for_backward(x_rows, h0, weight_ih, weight_hh)
        ctx.pool, ctx.workspace = pool, ws
        # outputs are fresh tensors: the workspace never escapes
        return hs.transpose(0, 1).contiguous(), hs[steps - 1].clone()

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_output: Tensor, grad_last: Tensor
    ) -> tuple[Tensor | None, ...]:
        ws = ctx.workspace
        if ws is None:
            raise RuntimeError(
                "a FusedGRU module does not support a second backward through the same "
                "graph (retain_graph=True): its buffers went back to the module's pool; "
                "use the functional fused_gru(pool=None) for repeated backward passes"
            )
        x_rows, h0, weight_ih, weight_hh = ctx.saved_tensors
        steps, batch, hidden = ws.hs.shape
        r = ws.rz[:, :, :hidden]
        z = ws.rz[:, :, hidden:]
        q = ws.step_addend[:, :, 2 * hidden :]  # holds the pre-activations now
        new, hs, h_prev, d_tanh = ws.new, ws.hs, ws.h_prev, ws.d_tanh
        h_prev[0].copy_(h0)
        h_prev[1:].copy_(hs[:-1])
        c_r, c_z, c_q = ws.coeff.unbind(1)
        one_minus_z = torch.sub(1.0, z, out=ws.one_minus_z)
        torch.mul(new, new, out=d_tanh).neg_().add_(1.0).mul_(one_minus_z)  # d a_n / g_t
        torch.addcmul(r, r, r, value=-1.0, out=c_r).mul_(q).mul_(d_tanh)
        torch.sub(h_prev, new, out=c_z).mul_(z).mul_(one_minus_z)
        torch.mul(d_tanh, r, out=c_q)

        g_all = ws.g_all  # becomes dL/dh_t
        g_all.copy_(grad_output.transpose(0, 1))
        g_all[steps - 1] += grad_last
        views = ws.backward_views
        for t in range(steps - 1, 0, -1):
            g_t, coeff_t, d_t, d_row, z_t = views[t]
            torch.mul(g_t, coeff_t, out=d_t)
            g_prev = views[t - 1][0]  # holds dL/dh_{t-1}|direct
            g_prev.addmm_(d_row, weight_hh).addcmul_(z_t, g_t)
        g_0, coeff_0, d_0, d_row_0, z_0 = views[0]
        torch.mul(g_0, coeff_0, out=d_0)
        grad_h0 = torch.addcmul(torch.mm(d_row_0, weight_hh), z_0, g_0)

        d_hidden_pre = ws.d_hidden.view(steps * batch, 3 * hidden)
        d_input_pre = ws.d_input
        d_input_pre[:, : 2 * hidden] = d_hidden_pre[:, : 2 * hidden]
        torch.mul(g_all, d_tanh, out=d_input_pre[:, 2 * hidden :].view(steps, batch, hidden))
        needs = ctx.needs_input_grad
        grad_x = grad_wih = grad_whh = grad_bih = grad_bhh = None
        if needs[1]:
            grad_x = (
                torch.mm(d_input_pre, weight_ih)
                .view(steps, batch, x_rows.shape[1])
                .transpose(0, 1)
                .contiguous()
            )
        if not needs[2]:
            grad_h0 = None
        if needs[3]:
            # (x^T D)^T rather than D^T x: the latter is ~5x slower for a thin x.
            grad_wih = torch.mm(x_rows.t(), d_input_pre).t().contiguous()
        if needs[4]:
            grad_whh = torch.mm(d_hidden_pre.t(), h_prev.view(steps * batch, hidden))
        if needs[5]:
            grad_bih = d_input_pre.sum(dim=0)
        if needs[6]:
            grad_bhh = d_hidden_pre.sum(dim=0)
        if ctx.pool is not None:  # a shared pool: hand the buffers back for reuse
            ctx.workspace = None
            ctx.pool.release(ws)
        return None, grad_x, grad_h0, grad_wih, grad_whh, grad_bih, grad_bhh


def fused_gru(
    x: Tensor,
    h0: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor,
    bias_hh: Tensor,
    *,
    pool: WorkspacePool | None = None,
) -> tuple[Tensor, Tensor]:
    """Functional fused GRU layer.

    Parameters
    ----------
    x : Tensor, shape (B, T, I), float32 or float64, CPU
        Batch-first input sequence, ``T >= 1``.
    h0 : Tensor, shape (B, H)
        Initial hidden state.
    weight_ih, weight_hh : Tensor, shapes (3H, I) and (3H, H)
        Gate weights stacked in the order (r, z, n), as ``nn.GRU``.
    bias_ih, bias_hh : Tensor, shape (3H,)
    pool : WorkspacePool or None
        Buffers to reuse across calls (a :class:`FusedGRU` passes its own); they
        go back to the pool at the end of the backward pass, so a second
        backward through the same graph raises. None allocates fresh buffers
        and allows repeated backward passes (``retain_graph=True``).

    Returns
    -------
    output : Tensor, shape (B, T, H)
        Hidden state after every step.
    h_last : Tensor, shape (B, H)
        Hidden state after the last step.

    Notes
    -----
    Equations of ``torch.nn.GRU`` [1]_; see :class:`_FusedGRUFunction` for the
    backward pass.

    References
    ----------
    .. [1] PyTorch documentation, ``torch.nn.GRU``.
    """
    if x.dim() != 3:
        raise FusedGRUInputError(
            f"x must be batch-first (B, T, I); got shape {tuple(x.shape)}; add a batch axis"
        )
    batch, steps, features = x.shape
    hidden = weight_hh.shape[1]
    if steps < 1 or batch < 1:
        raise FusedGRUInputError(f"x must have B >= 1 and T >= 1; got shape {tuple(x.shape)}")
    expected = {
        "h0": (h0, (batch, hidden)),
        "weight_ih": (weight_ih, (3 * hidden, features)),
        "weight_hh": (weight_hh, (3 * hidden, hidden)),
        "bias_ih": (bias_ih, (3 * hidden,)),
        "bias_hh": (bias_hh, (3 * hidden,)),
    }
    for name, (tensor, shape) in expected.items():
        if tuple(tensor.shape) != shape:
            raise FusedGRUInputError(
                f"{name} must have shape {shape} for x of shape {tuple(x.shape)} and "
                f"hidden size {hidden}; got {tuple(tensor.shape)}"
            )
        if tensor.dtype != x.dtype:
            raise FusedGRUInputError(f"{name} has dtype {tensor.dtype}; x has {x.dtype}")
    for name, tensor in (("x", x), *((n, t) for n, (t, _) in expected.items())):
        if tensor.device.type != "cpu":
            raise FusedGRUInputError(f"{name} is on {tensor.device}; the fused GRU is CPU only")
    tensors = (x, h0, weight_ih, weight_hh, bias_ih, bias_hh)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _FusedGRUFunction.apply(
            pool,
            x, h0.contiguous(), weight_ih, weight_hh, bias_ih, bias_hh,
        )  # fmt: skip
    # No graph: same arithmetic, intermediates in small scratch buffers.
    x_rows = x.transpose(0, 1).reshape(steps * batch, features)
    hs = _recurrence(None, x_rows, steps, h0.contiguous(), weight_ih, weight_hh, bias_ih, bias_hh)
    return hs.transpose(0, 1).contiguous(), hs[steps - 1].clone()


class FusedGRU(nn.Module):
    """Drop-in replacement for ``nn.GRU(input_size, hidden_size, batch_first=True)``.

    Parameters
    ----------
    input_size : int
        Features per time step.
    hidden_size : int
        Hidden units ``H``.

    Notes
    -----
    Parameters ``weight_ih_l0`` (3H, I), ``weight_hh_l0`` (3H, H), ``bias_ih_l0``
    (3H,), ``bias_hh_l0`` (3H,), registered in that order, each initialised
    ``U(-1/sqrt(H), 1/sqrt(H))`` as ``nn.GRU.reset_parameters`` does.
    ``forward(x, hx=None)`` returns ``(output (B, T, H), h_n (1, B, H))`` like
    ``nn.GRU``; ``hx`` has shape (1, B, H) and defaults to zeros.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FusedGRUInputError(f"{name} must be a positive int; got {value!r}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.weight_ih_l0 = nn.Parameter(torch.empty(3 * hidden_size, input_size))
        self.weight_hh_l0 = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))
        self.bias_ih_l0 = nn.Parameter(torch.empty(3 * hidden_size))
        self.bias_hh_l0 = nn.Parameter(torch.empty(3 * hidden_size))
        self.workspaces = WorkspacePool()  # reused buffers, not state: never saved
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Draw every parameter from ``U(-1/sqrt(H), 1/sqrt(H))`` in registration order."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.uniform_(-bound, bound, generator=generator)

    def forward(self, x: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Run the layer; see the class docstring for shapes."""
        if x.dim() != 3:
            raise FusedGRUInputError(f"x must be batch-first (B, T, I); got shape {tuple(x.shape)}")
        if hx is None:
            h0 = x.new_zeros(x.shape[0], self.hidden_size)
        elif hx.dim() != 3 or hx.shape[0] != 1:
            raise FusedGRUInputError(f"hx must have shape (1, B, H); got {tuple(hx.shape)}")
        else:
            h0 = hx[0]
        output, h_last = fused_gru(
            x, h0, self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0,
            pool=self.workspaces,
        )  # fmt: skip
        return output, h_last.unsqueeze(0)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, batch_first=True"
