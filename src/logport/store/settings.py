"""The store's own settings (the config file's [store] section). The dataclass is written in config.py
beside every other section and its checks, so that the config imports nothing of the store; the store
takes it from here."""

from __future__ import annotations

from logport.config import MiB, StoreConfig

__all__ = ["MiB", "StoreConfig"]
