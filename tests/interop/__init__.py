"""Interop tests: logport against real third-party peers."""
