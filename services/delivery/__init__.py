"""delivery service."""
