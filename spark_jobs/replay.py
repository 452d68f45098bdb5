"""The replay job: re-admit quarantined records the current config accepts.

spark-submit runs this file; the work is ``loglake.lifecycle.replay_job``.
"""

import sys

from loglake.lifecycle.replay_job import main

if __name__ == "__main__":
    sys.exit(main())
