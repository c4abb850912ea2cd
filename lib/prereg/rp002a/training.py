"""Training with early stopping for the RP002A learned predictors (B1, B2).

Reads top to bottom like the protocol: a :class:`TrainConfig` taken from the
plan; Adam over shuffled mini-batches of whole episodes with gradient-norm
clipping; the clipped log loss on the validation split after every epoch; the
minimum-validation checkpoint kept and restored; stop after ``patience`` epochs
without improvement or at the epoch cap. Assessment is separate and happens only
after selection (:func:`predict_probabilities`).

Data conventions: observations ``uint8 [episodes, T]`` in ``0..n_symbols-1``,
targets ``uint8 [episodes, T]`` in ``0..n_targets-1``, the model's logits
``[episodes, T, n_targets]``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import torch
from torch import Tensor, nn

from prereg.api import BudgetExceeded
from prereg.rp002a.models import initialise_parameters
from prereg.rp002a.specs import TrainConfig, TrainConfigError

__all__ = [
    "BudgetExceeded",
    "EpochRecord",
    "NonFiniteLoss",
    "TrainConfig",
    "TrainConfigError",
    "TrainInputError",
    "TrainResult",
    "WeightsFormatError",
    "clipped_log_loss",
    "load_weights",
    "mean_clipped_log_loss",
    "predict_probabilities",
    "save_weights",
    "selection_flags",
    "train",
    "weights_from_bytes",
    "weights_to_bytes",
]


class TrainInputError(ValueError):
    """Training or prediction data have the wrong dtype, shape or values."""


class WeightsFormatError(ValueError):
    """A weights file is not in the format written by :func:`weights_to_bytes`."""


class NonFiniteLoss(RuntimeError):
    """A training or validation loss became NaN or infinite; ``trace`` is attached."""

    def __init__(self, trace: tuple[EpochRecord, ...], epoch: int) -> None:
        super().__init__(f"non-finite loss in epoch {epoch}; partial trace attached")
        self.trace = trace
        self.epoch = epoch


@dataclasses.dataclass(frozen=True)
class EpochRecord:
    """One epoch of the trace.

    ``train_loss`` is the running mean clipped log loss of the epoch's mini-batches
    (weighted by batch size, weights changing during the epoch);
    ``validation_loss`` is :func:`mean_clipped_log_loss` after the epoch;
    ``seconds`` is the epoch's wall time including validation.
    """

    epoch: int
    train_loss: float
    validation_loss: float
    seconds: float


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """Outcome of :func:`train`; the model itself already holds ``best_state``.

    Attributes
    ----------
    best_state : dict of str to Tensor
        Copy of the state dict at the selected (minimum-validation) epoch.
    best_epoch : int
        Selected epoch, 1-based; ties keep the earliest epoch.
    best_validation_loss : float
    epochs_run : int
    stop_reason : {"patience", "cap"}
    trace : tuple of EpochRecord
    near_cap : bool
        ``epochs_run >= max_epochs - patience``.
    final_20 : bool
        ``best_epoch > epochs_run - final_20_window``: the selected epoch is among
        the last ``final_20_window`` epochs run. With ``final_20_window <=
        patience`` this can only happen when the cap ended training.
    final_five : bool
        ``best_epoch > epochs_run - final_five_window``.

    Notes
    -----
    The protocol keeps near-cap/final-20/final-five flags "with prior
    definitions" that are not available to this project; the definitions above
    are this project's and are fixed before any outcome. The flags preclude a
    claim of settled optimisation; they do not change the estimand.
    """

    best_state: dict[str, Tensor]
    best_epoch: int
    best_validation_loss: float
    epochs_run: int
    stop_reason: str
    trace: tuple[EpochRecord, ...]
    near_cap: bool
    final_20: bool
    final_five: bool


def clipped_log_loss(logits: Tensor, targets: Tensor, probability_clip: float) -> Tensor:
    """Per-timepoint clipped natural log loss ``-log(max(softmax(logits)[y], clip))``.

    Parameters
    ----------
    logits : Tensor, shape (B, T, K)
    targets : Tensor of int64, shape (B, T), values in ``0..K-1``
    probability_clip : float in (0, 1)

    Returns
    -------
    Tensor, shape (B, T)

    Notes
    -----
    Computed as ``-max(log_softmax(logits)[y], log(clip))``, equal to the
    protocol's ``-log(max(p_y, clip))`` because ``log`` is increasing, and stable
    for very negative logits. Below the clip the gradient is zero. The softmax
    runs over a class-major copy (``[B, K, T]``): torch's CPU kernel is an order
    of magnitude slower over a short last axis.
    """
    class_major = logits.transpose(-1, -2).contiguous()
    log_p = torch.log_softmax(class_major, dim=-2).gather(-2, targets.unsqueeze(-2)).squeeze(-2)
    return -torch.clamp(log_p, min=math.log(probability_clip))


def _check_pair(
    name: str, observations: np.ndarray, targets: np.ndarray | None, model: nn.Module
) -> None:
    arrays = [(f"{name}_obs", observations, getattr(model, "n_symbols", None))]
    if targets is not None:
        arrays.append((f"{name}_targets", targets, getattr(model, "n_targets", None)))
    for label, array, n_values in arrays:
        if not isinstance(array, np.ndarray) or array.dtype != np.uint8:
            raise TrainInputError(
                f"{label} must be a numpy uint8 array; got "
                f"{type(array).__name__} {getattr(array, 'dtype', '')}"
            )
        if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
            raise TrainInputError(f"{label} must have shape (episodes>=1, T>=1); got {array.shape}")
        if n_values is not None and int(array.max()) >= n_values:
            raise TrainInputError(
                f"{label} holds value {int(array.max())}; the model accepts 0..{n_values - 1}"
            )
    if targets is not None and targets.shape != observations.shape:
        raise TrainInputError(
            f"{name}_targets shape {targets.shape} differs from {name}_obs shape "
            f"{observations.shape}"
        )


def _as_long(array: np.ndarray) -> Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))


EVAL_CHUNK_EPISODES = 256
"""Episodes per forward pass in evaluation (bounds memory; fixed so that saved
predictions replay bit for bit). Not a scientific parameter."""


def _chunked_logits(
    model: nn.Module, observations: np.ndarray, chunk_episodes: int
) -> Iterator[tuple[int, Tensor]]:
    if (
        isinstance(chunk_episodes, bool)
        or not isinstance(chunk_episodes, int)
        or chunk_episodes < 1
    ):
        raise TrainInputError(f"chunk_episodes must be a positive int; got {chunk_episodes!r}")
    data = _as_long(observations)
    for start in range(0, data.shape[0], chunk_episodes):
        yield start, model(data[start : start + chunk_episodes])


@torch.no_grad()
def mean_clipped_log_loss(
    model: nn.Module,
    observations: np.ndarray,
    targets: np.ndarray,
    probability_clip: float,
    *,
    chunk_episodes: int = EVAL_CHUNK_EPISODES,
) -> float:
    """Mean clipped log loss of ``model`` over all episodes and timepoints.

    Episodes have equal length, so the mean over timepoints then episodes is the
    plain mean; it is accumulated in float64 from per-episode float32 losses.
    The model runs in eval mode, ``chunk_episodes`` episodes at a time, and its
    previous mode is restored.
    """
    _check_pair("eval", observations, targets, model)
    target_tensor = _as_long(targets)
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64)
    try:
        for start, logits in _chunked_logits(model, observations, chunk_episodes):
            chunk = target_tensor[start : start + logits.shape[0]]
            total += clipped_log_loss(logits, chunk, probability_clip).to(torch.float64).sum()
    finally:
        model.train(was_training)
    return float(total) / targets.size


@torch.no_grad()
def predict_probabilities(
    model: nn.Module, observations: np.ndarray, *, chunk_episodes: int = EVAL_CHUNK_EPISODES
) -> np.ndarray:
    """Softmax probabilities ``float32 [N, T, n_targets]`` for assessment.

    Runs under ``no_grad`` in eval mode (previous mode restored), ``chunk_episodes``
    episodes at a time; call it only after selection, i.e. after :func:`train`
    restored the best weights.
    """
    _check_pair("predict", observations, None, model)
    was_training = model.training
    model.eval()
    parts = []
    try:
        for _, logits in _chunked_logits(model, observations, chunk_episodes):
            # class-major softmax (fast on CPU, see clipped_log_loss), back to [N, T, K]
            probabilities = torch.softmax(logits.transpose(-1, -2).contiguous(), dim=-2)
            parts.append(probabilities.transpose(-1, -2).to(torch.float32))
    finally:
        model.train(was_training)
    return torch.cat(parts).numpy().copy()


def train(
    model: nn.Module,
    train_obs: np.ndarray,
    train_targets: np.ndarray,
    val_obs: np.ndarray,
    val_targets: np.ndarray,
    config: TrainConfig,
    *,
    init_generator: torch.Generator,
    order_generator: np.random.Generator,
    deadline: float | None = None,
    progress: Callable[[int, float, float], None] | None = None,
) -> TrainResult:
    """Fit ``model`` with Adam and minimum-validation early stopping.

    Parameters
    ----------
    model : nn.Module
        From :func:`prereg.rp002a.models.build_model`. All its parameters are
        redrawn from ``init_generator`` first (its current weights are ignored);
        on return it holds the selected weights.
    train_obs, train_targets, val_obs, val_targets : ndarray of uint8, (episodes, T)
    config : TrainConfig
    init_generator : torch.Generator
        Initial weights (:func:`~prereg.rp002a.models.initialise_parameters`).
    order_generator : numpy.random.Generator
        One ``permutation(n_train)`` per epoch.
    deadline : float or None
        A ``time.monotonic()`` value, checked before every epoch; if passed,
        :class:`BudgetExceeded` is raised carrying the trace so far.
    progress : callable(epoch, train_loss, validation_loss) or None
        Called after every epoch.

    Returns
    -------
    TrainResult

    Notes
    -----
    Each epoch: permute the training episodes, take consecutive mini-batches of
    ``batch_size`` episodes (the last one smaller if the count is not a multiple),
    minimise the mean clipped log loss of the batch (:func:`clipped_log_loss`),
    clip the global gradient L2 norm to ``grad_clip_norm``
    (``torch.nn.utils.clip_grad_norm_``), take an Adam step (single-tensor
    implementation, no weight decay). Then the validation loss
    (:func:`mean_clipped_log_loss`); a strictly smaller value makes the epoch the
    new checkpoint (ties keep the earliest). Training stops with ``"patience"``
    once ``patience`` epochs have passed since the checkpoint (this wins if it
    happens exactly at the cap), else with ``"cap"`` after ``max_epochs``.

    Determinism: with the same generators, data, config and a fixed torch thread
    count (a stage uses one thread per worker), weights and trace losses are
    identical bit for bit. The function never touches torch's global RNG or
    thread settings.
    """
    _check_pair("train", train_obs, train_targets, model)
    _check_pair("val", val_obs, val_targets, model)
    if not isinstance(config, TrainConfig):
        raise TrainConfigError(f"config must be a TrainConfig; got {type(config).__name__}")
    if not isinstance(order_generator, np.random.Generator):
        raise TrainConfigError(
            f"order_generator must be a numpy.random.Generator; got {type(order_generator).__name__}"
        )

    initialise_parameters(model, init_generator)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.Adam(
        parameters,
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        foreach=False,
    )
    observations = _as_long(train_obs)
    targets = _as_long(train_targets)
    n_train = observations.shape[0]

    trace: list[EpochRecord] = []
    best_state = _copy_state(model)
    best_epoch = 0
    best_loss = math.inf
    stop_reason = "cap"
    for epoch in range(1, config.max_epochs + 1):
        if deadline is not None and time.monotonic() >= deadline:
            raise BudgetExceeded(
                f"training deadline exceeded after {len(trace)} epoch(s) "
                f"(monotonic deadline {deadline:.3f}); partial trace attached",
                trace=tuple(trace),
                deadline=deadline,
            )
        started = time.perf_counter()
        model.train()
        order = torch.from_numpy(order_generator.permutation(n_train))
        loss_sum = 0.0
        for start in range(0, n_train, config.batch_size):
            batch = order[start : start + config.batch_size]
            logits = model(observations[batch])
            loss = clipped_log_loss(logits, targets[batch], config.probability_clip).mean()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(parameters, config.grad_clip_norm, foreach=False)
            optimiser.step()
            loss_sum += loss.item() * batch.shape[0]
        train_loss = loss_sum / n_train
        val_loss = mean_clipped_log_loss(model, val_obs, val_targets, config.probability_clip)
        trace.append(EpochRecord(epoch, train_loss, val_loss, time.perf_counter() - started))
        if not (math.isfinite(train_loss) and math.isfinite(val_loss)):
            raise NonFiniteLoss(tuple(trace), epoch)
        if progress is not None:
            progress(epoch, train_loss, val_loss)
        if val_loss < best_loss:
            best_loss, best_epoch, best_state = val_loss, epoch, _copy_state(model)
        elif epoch - best_epoch >= config.patience:
            stop_reason = "patience"
            break

    model.load_state_dict(best_state)
    epochs_run = len(trace)
    return TrainResult(
        best_state=best_state,
        best_epoch=best_epoch,
        best_validation_loss=best_loss,
        epochs_run=epochs_run,
        stop_reason=stop_reason,
        trace=tuple(trace),
        **selection_flags(best_epoch, epochs_run, config),
    )


def selection_flags(best_epoch: int, epochs_run: int, config: TrainConfig) -> dict[str, bool]:
    """The near-cap / final-20 / final-five flags of :class:`TrainResult`.

    Returns ``{"near_cap": epochs_run >= max_epochs - patience, "final_20":
    best_epoch > epochs_run - final_20_window, "final_five": best_epoch >
    epochs_run - final_five_window}``; see :class:`TrainResult` for their meaning.
    """
    if not 1 <= best_epoch <= epochs_run <= config.max_epochs:
        raise TrainInputError(
            f"need 1 <= best_epoch ({best_epoch}) <= epochs_run ({epochs_run}) <= "
            f"max_epochs ({config.max_epochs})"
        )
    return {
        "near_cap": epochs_run >= config.max_epochs - config.patience,
        "final_20": best_epoch > epochs_run - config.final_20_window,
        "final_five": best_epoch > epochs_run - config.final_five_window,
    }


def _copy_state(model: nn.Module) -> dict[str, Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


# --- weights files --------------------------------------------------------------------

_MAGIC = b"PREREG-WEIGHTS-1\n"
_DTYPES = {torch.float32: "<f4", torch.float64: "<f8", torch.int64: "<i8"}
_TORCH_DTYPES = {code: dtype for dtype, code in _DTYPES.items()}


def weights_to_bytes(state: Mapping[str, Tensor]) -> bytes:
    """Serialise a state dict deterministically (same tensors -> same bytes).

    Notes
    -----
    Layout: the magic line ``PREREG-WEIGHTS-1\\n``; the header length as 8-byte
    little-endian unsigned; the header, canonical JSON (UTF-8, sorted keys, no
    spaces) ``{"tensors": [{"dtype": "<f4", "name": ..., "shape": [...]}, ...]}``
    with tensors sorted by name; then each tensor's raw little-endian C-order
    bytes in header order. Supported dtypes: float32, float64, int64.
    """
    entries = []
    payload = io.BytesIO()
    for name in sorted(state):
        tensor = state[name]
        if not isinstance(tensor, Tensor) or tensor.dtype not in _DTYPES:
            raise WeightsFormatError(
                f"state[{name!r}] must be a float32/float64/int64 tensor; got "
                f"{getattr(tensor, 'dtype', type(tensor).__name__)}"
            )
        code = _DTYPES[tensor.dtype]
        array = tensor.detach().cpu().contiguous().numpy().astype(code, copy=False)
        entries.append({"dtype": code, "name": name, "shape": list(array.shape)})
        payload.write(np.ascontiguousarray(array).tobytes(order="C"))
    header = json.dumps({"tensors": entries}, sort_keys=True, separators=(",", ":"))
    header_bytes = header.encode("utf-8")
    return _MAGIC + len(header_bytes).to_bytes(8, "little") + header_bytes + payload.getvalue()


def weights_from_bytes(data: bytes) -> dict[str, Tensor]:
    """Inverse of :func:`weights_to_bytes`; tensors in sorted name order."""
    if not data.startswith(_MAGIC):
        raise WeightsFormatError("not a prereg weights file (missing PREREG-WEIGHTS-1 magic)")
    offset = len(_MAGIC)
    header_length = int.from_bytes(data[offset : offset + 8], "little")
    offset += 8
    try:
        header = json.loads(data[offset : offset + header_length].decode("utf-8"))
        entries = header["tensors"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise WeightsFormatError(f"weights header is unreadable: {error}") from None
    offset += header_length
    state: dict[str, Tensor] = {}
    for entry in entries:
        code = entry.get("dtype")
        if code not in _TORCH_DTYPES:
            raise WeightsFormatError(f"tensor {entry.get('name')!r} has unknown dtype {code!r}")
        dtype = np.dtype(code)
        count = int(np.prod(entry["shape"], dtype=np.int64))
        end = offset + count * dtype.itemsize
        if end > len(data):
            raise WeightsFormatError(f"weights data truncated in tensor {entry['name']!r}")
        array = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
        state[entry["name"]] = torch.from_numpy(
            array.reshape(entry["shape"]).astype(dtype.newbyteorder("="))
        )
        offset = end
    if offset != len(data):
        raise WeightsFormatError(f"{len(data) - offset} trailing bytes after the last tensor")
    return state


def save_weights(state: Mapping[str, Tensor], path: str | os.PathLike[str]) -> None:
    """Write :func:`weights_to_bytes` of ``state`` to ``path``."""
    with open(path, "wb") as handle:
        handle.write(weights_to_bytes(state))


def load_weights(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """Read a file written by :func:`save_weights`."""
    with open(path, "rb") as handle:
        return weights_from_bytes(handle.read())
