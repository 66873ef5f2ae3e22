"""logport: an event hub for log pipelines."""

__version__ = "0.1.0"
