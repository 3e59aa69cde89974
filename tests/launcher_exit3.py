"""A child for tests/test_launcher.py: it exits with status 3 before announcing anything."""

import sys

sys.exit(3)
