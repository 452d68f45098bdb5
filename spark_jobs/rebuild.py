"""The rebuild job: rebuild a table from the log.

spark-submit runs this file; the work is ``loglake.lifecycle.rebuild_job``.
"""

import sys

from loglake.lifecycle.rebuild_job import main

if __name__ == "__main__":
    sys.exit(main())
