"""The batch job: recompute a plan's exact offset ranges.

spark-submit runs this file; the work is ``loglake.batch.job``.
"""

import sys

from loglake.batch.job import main

if __name__ == "__main__":
    sys.exit(main())
