"""A child for tests/test_launcher.py: it dies by SIGKILL before announcing anything."""

import os
import signal

os.kill(os.getpid(), signal.SIGKILL)
