"""Mesh runtime shared by every service: config, telemetry, errors, server bootstrap, clients."""
