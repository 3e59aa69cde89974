"""``python -m services.csl``."""

import sys

from services.csl.server import main

sys.exit(main())
