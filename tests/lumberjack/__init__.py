"""Lumberjack (Beats) protocol, server, client and output tests."""
