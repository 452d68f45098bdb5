"""The quality job: validate a written range and publish it.

spark-submit runs this file; the work is ``loglake.quality.job``.
"""

import sys

from loglake.quality.job import main

if __name__ == "__main__":
    sys.exit(main())
