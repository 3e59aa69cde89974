"""``python -m services.admission``."""

import sys

from services.admission.server import main

sys.exit(main())
