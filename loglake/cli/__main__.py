"""``python -m loglake.cli``."""

import sys

from loglake.cli import main

sys.exit(main())
