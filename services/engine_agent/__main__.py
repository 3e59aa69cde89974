"""``python -m services.engine_agent``."""

import sys

from services.engine_agent.server import main

sys.exit(main())
