"""The speed application: every wanted dataset's stream in one driver.

spark-submit runs this file; the work is ``loglake.speed.app``.
"""

import sys

from loglake.speed.app import main

if __name__ == "__main__":
    sys.exit(main())
