"""``python -m services.corpus``."""

import sys

from services.corpus.server import main

sys.exit(main())
