"""The maintenance job: expire, optimize and vacuum a dataset's tables.

spark-submit runs this file; the work is ``loglake.maintenance.job``.
"""

import sys

from loglake.maintenance.job import main

if __name__ == "__main__":
    sys.exit(main())
