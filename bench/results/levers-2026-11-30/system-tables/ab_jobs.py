"""A/B of a batch job's and a quality job's wall: run_batch + run_quality of job_views (2,000
records, fresh dataset per repeat), in-process Spark, after one warm-up pair."""
import sys, tempfile, time, statistics
from pathlib import Path
from loglake.testing import Lab
from loglake.local.produce import produce
from loglake.batch.planning import plan_batch
from loglake.batch.recompute import run_batch
from loglake.quality.gate import run_quality

lab = Lab(Path(tempfile.mkdtemp()))
spark = lab.spark()
out = {"batch": [], "quality": [], "bphases": [], "qphases": []}
for i in range(int(sys.argv[1]) + 1):
    config = lab.config()
    ds = config.dataset("job_views")
    produce(config, ds, 2000, bad_fraction=0.05, seed=i, progress=False)
    plan = plan_batch(config, ds)
    t = time.monotonic(); b = run_batch(spark, config, ds, plan, f"r{i}"); tb = time.monotonic() - t
    t = time.monotonic(); q = run_quality(spark, config, ds, plan, f"r{i}"); tq = time.monotonic() - t
    print(f"repeat {i}: batch {tb:.2f}s {b.phases}  quality {tq:.2f}s {q.phases}", flush=True)
    if i:
        out["batch"].append(tb); out["quality"].append(tq)
print(f"median batch {statistics.median(out['batch']):.2f}s quality {statistics.median(out['quality']):.2f}s "
      f"(repeats {len(out['batch'])}, the first pair not counted)")
lab.close()
