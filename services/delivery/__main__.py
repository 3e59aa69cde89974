"""``python -m services.delivery``."""

import sys

from services.delivery.server import main

sys.exit(main())
