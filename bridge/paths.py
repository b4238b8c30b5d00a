"""Path rules the engine, the runtime and the configuration checks share: whether a path
lies inside a folder, and a file name that is only a name. Pure."""

from __future__ import annotations

from pathlib import Path


def within(path: Path, folder: Path) -> bool:
    """`path` is `folder` or lies below it (both already resolved)."""
    return path == folder or folder in path.parents


def safe_name(name: str) -> str:
    """A file name that is only a name: no folder, no `..`, no control characters."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in base).strip("._")
    return cleaned[:100] or "attachment"
