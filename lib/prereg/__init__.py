"""prereg: preregistered research stages executed as pytest collections."""

from __future__ import annotations

__version__ = "0.1.0"
