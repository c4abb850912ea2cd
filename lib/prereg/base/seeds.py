"""Seeds derived from SHA-256 namespaces.

``seed(namespace, *coords)`` is the first eight bytes (big-endian) of the SHA-256
of the canonical string ``namespace/coord1/coord2/...``. Every random number in a
research stage comes from a generator built from such a seed, and the derivation
string is recorded next to the result, so an auditor can regenerate any cell.

A rehearsal draws from :func:`rehearsal_namespace` of the plan's namespace, never from the
plan's own: no number a rehearsal item draws is one its run will draw, so a rehearsal
shows that the stage works without showing the run's outcome.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_SEPARATOR = "/"


REHEARSAL_SUFFIX = "~rehearsal"


class SeedCoordinateError(ValueError):
    """A namespace or coordinate cannot be written unambiguously."""


def rehearsal_namespace(namespace: str | None) -> str | None:
    """The seed namespace a rehearsal of a stage whose plan names ``namespace`` draws from:
    ``namespace`` + :data:`REHEARSAL_SUFFIX` (None for a stage without one)."""
    return None if namespace is None else namespace + REHEARSAL_SUFFIX


def derivation(namespace: str, *coords: object) -> str:
    """The canonical string hashed by :func:`seed`, e.g. ``calibration-1.0/sim/20``.

    Coordinates are rendered with ``str``; a namespace or coordinate containing
    ``/`` (or an empty namespace) is refused because it would make two different
    coordinate tuples share one string.
    """
    if not namespace:
        raise SeedCoordinateError("seed namespace must be a non-empty string")
    parts = [namespace, *(str(c) for c in coords)]
    for part in parts:
        if _SEPARATOR in part or part == "":
            raise SeedCoordinateError(
                f"seed coordinate {part!r} is empty or contains {_SEPARATOR!r}; "
                "rename it so the derivation string stays unambiguous"
            )
        try:
            part.encode("utf-8")
        except UnicodeEncodeError:
            raise SeedCoordinateError(
                f"seed coordinate {part!r} is not valid Unicode text (a lone surrogate); "
                "it cannot be hashed reproducibly"
            ) from None
    return _SEPARATOR.join(parts)


def seed(namespace: str, *coords: object) -> int:
    """First 8 bytes of SHA-256(``derivation(namespace, *coords)``) as an unsigned int."""
    digest = hashlib.sha256(derivation(namespace, *coords).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def numpy_generator(namespace: str, *coords: object) -> np.random.Generator:
    """``numpy.random.Generator(PCG64(seed(namespace, *coords)))``."""
    # numpy: only for the stages that draw from it; the plugin imports this module, and the
    # harness's own processes (launcher, listing, session of a stage without numpy) never load it
    import numpy as np

    return np.random.Generator(np.random.PCG64(seed(namespace, *coords)))


def torch_generator(namespace: str, *coords: object):
    """A CPU ``torch.Generator`` seeded with ``seed(namespace, *coords)``.

    torch's ``manual_seed`` takes values below 2**64, which the seed always is.
    torch is imported here, not at module level, so that stages without torch
    (E04 with the LM Studio backend) never import it.
    """
    # torch: the training extra, optional
    import torch

    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed(namespace, *coords))
    return generator
