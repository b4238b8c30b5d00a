"""Where the bridge keeps its state: a SQLite file in the data folder, or a PostgreSQL
database (which several instances can share, bridge/config/cluster.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import platformdirs
from pydantic import Field, SecretStr, field_validator

from bridge.config.base import Section, empty_is_unset, why


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("feishu-presence-bridge", appauthor=False))


class StoreSection(Section):
    """The data folder and the database."""

    title: ClassVar[str] = "Storage"

    bridge_data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Folder holding the SQLite store.",
        json_schema_extra=why(
            "In a deployment: a folder that persists, readable by the bridge's user alone"
            " (e.g. /var/lib/feishu-bridge)."
        ),
    )
    bridge_database_url: SecretStr | None = Field(
        default=None,
        description="PostgreSQL database of the store instead of the SQLite file, e.g."
        " `postgresql://bridge:<password>@db.internal:5432/bridge` (a secret: it holds the"
        " password); unset: SQLite in BRIDGE_DATA_DIR.",
        json_schema_extra=why(
            "To run several instances on one store, or to keep the store in your PostgreSQL."
        ),
    )

    @field_validator("bridge_data_dir", mode="before")
    @classmethod
    def _empty_path_is_default(cls, value: Any) -> Any:
        # An empty path would silently mean "the current directory".
        if isinstance(value, str) and not value.strip():
            return default_data_dir()
        return value

    @field_validator("bridge_database_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return empty_is_unset(value)

    @field_validator("bridge_database_url")
    @classmethod
    def _database_url(cls, value: SecretStr | None) -> SecretStr | None:
        # The message never quotes the value: it holds a password.
        if value is None:
            return None
        url = value.get_secret_value().strip()
        if not url.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a URL starting with postgresql:// or postgres://")
        return SecretStr(url)

    @property
    def db_path(self) -> Path:
        return self.bridge_data_dir / "bridge.sqlite3"
