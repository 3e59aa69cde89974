"""admission service."""
