"""``python -m services.gateway``."""

import sys

from services.gateway.server import main

sys.exit(main())
