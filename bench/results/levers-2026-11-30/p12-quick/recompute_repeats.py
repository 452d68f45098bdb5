import time, tempfile
from pathlib import Path
from bench.harness import Harness
from loglake.testing import workload
from loglake.kafka.admin import ensure_topic, log_bounds
from loglake.core.offsets import OffsetRange
from loglake.core.plans import Plan
from loglake.batch.recompute import run_batch
h = Harness(Path(tempfile.mkdtemp()), repeats=1, quick=True)
config = h.config("batch", extra_datasets={workload.DATASET: workload.dataset_file(6)})
ds = config.dataset(workload.DATASET)
topic = ensure_topic(config, ds)
workload.produce(h.bootstrap, topic, 30000, 100)
spark = h.spark(config)
plan = Plan(ds.name, tuple(OffsetRange(topic, p, lo, hi) for p, (lo, hi) in sorted(log_bounds(config, topic).items())), "backfill")
for i in range(6):
    t = time.monotonic(); s = run_batch(spark, config, ds, plan, f"x{i}")
    print(f"run {i}: {time.monotonic()-t:.1f}s {s.phases}", flush=True)
ds2 = config.dataset("job_views")
h.close() if hasattr(h, "close") else None
