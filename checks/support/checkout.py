"""The prereg checkout the checks run from (the helpers read its plans and experiments)."""

from __future__ import annotations

from pathlib import Path


def find_checkout(start: Path) -> Path:
    """The nearest folder at or above ``start`` holding ``pytest.ini`` and
    ``lib/prereg/__init__.py``: prereg's own checkout."""
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if (folder / "pytest.ini").is_file() and (folder / "lib/prereg/__init__.py").is_file():
            return folder
    raise RuntimeError(
        f"no prereg checkout (a folder with pytest.ini and lib/prereg/__init__.py) at or above "
        f"{start}; run the checks from a clone of prereg"
    )


CHECKOUT = find_checkout(Path(__file__).parent)
#: The folder holding the ``support`` package: a check's subprocess puts it on ``sys.path``
#: to import these helpers (pytest.ini's ``pythonpath`` does it for the checks).
CHECKS = CHECKOUT / "checks"
