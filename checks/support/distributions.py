"""Installed distributions and checkout metadata, made by hand (extension points, the
execution check)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
from pathlib import Path


def fake_distribution(
    site: Path,
    name: str,
    files: dict[str, str | bytes],
    extra: dict[str, str],
    version: str = "1.0",
) -> Path:
    """A distribution ``name`` at ``version`` installed in ``site``: its files (relative to
    ``site``; text or bytes) and a RECORD listing each with its SHA-256, plus ``extra``
    metadata files (for example ``entry_points.txt``). Returns its ``.dist-info`` folder."""
    meta = Path(site) / f"{name}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = []
    for rel, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        (Path(site) / rel).parent.mkdir(parents=True, exist_ok=True)
        (Path(site) / rel).write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        rows.append(f"{rel},sha256={digest.decode()},{len(data)}")
    for rel, text in extra.items():
        (meta / rel).write_text(text)
    rows.append(f"{meta.name}/RECORD,,")
    (meta / "RECORD").write_text("\n".join(rows) + "\n")
    return meta


def checkout_with_metadata(root: Path, folder: str, entry_points: str, name: str = "other") -> Path:
    """A committed git checkout ``root`` holding a minimal ``lib/prereg/`` (``plugin.py``,
    ``cli.py``), with uncommitted (git-ignored when it is an ``*.egg-info``) package metadata
    ``lib/<folder>`` of distribution ``name`` declaring ``entry_points``. Returns ``root``."""
    root = Path(root)
    root.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "a@b.c"], ["config", "user.name", "A"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    package = root / "lib" / "prereg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text("")
    (package / "cli.py").write_text("def main():\n    return 0\n")
    (root / ".gitignore").write_text("*.egg-info/\n__pycache__/\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "scratch"], cwd=root, check=True)
    meta = root / "lib" / folder
    meta.mkdir()
    (meta / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (meta / "entry_points.txt").write_text(entry_points)
    return root
