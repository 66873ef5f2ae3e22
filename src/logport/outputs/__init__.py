"""Durable egress: follow a segment from a checkpoint, send with a client, commit after the ack."""
