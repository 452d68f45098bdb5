"""The shared Spark application: batch-side jobs on request.

spark-submit runs this file; the work is ``loglake.jobs.server``.
"""

import sys

from loglake.jobs.server import serve

if __name__ == "__main__":
    sys.exit(serve())
