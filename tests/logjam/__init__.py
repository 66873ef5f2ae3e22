"""Logjam over ZeroMQ: codec tables, device, consumer, republishing."""
