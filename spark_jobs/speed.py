"""One dataset's speed stream (or one available-now run).

spark-submit runs this file; the work is ``loglake.speed.job``.
"""

import sys

from loglake.speed.job import main

if __name__ == "__main__":
    sys.exit(main())
