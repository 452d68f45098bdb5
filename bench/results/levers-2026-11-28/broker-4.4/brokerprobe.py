import json, shutil, statistics, sys, tempfile, time
from pathlib import Path
from confluent_kafka.admin import AdminClient, NewTopic
from loglake.testing.lab import Lab
from loglake.testing import workload
from bench.pyloop import bare

root = Path(tempfile.mkdtemp(prefix="bprobe-"))
lab = Lab(root, heap="512m")
try:
    b = lab.bootstrap
    a = AdminClient({"bootstrap.servers": b})
    a.create_topics([NewTopic("t", 6, 1)])["t"].result()
    time.sleep(1)
    n = 1_000_000
    ps = workload.produce(b, "t", n, 1024)
    runs = [bare(b, "t", n)["records_per_second"] for _ in range(3)]
    jar = [p.name for p in (Path(sys.argv[1]) / "jars" / "kafka").glob("kafka_2.13-*.jar")]
    print(json.dumps({"jar": jar, "produce_s": round(ps, 1), "bare_rps": runs, "median": statistics.median(runs)}))
finally:
    lab.close()
    shutil.rmtree(root, ignore_errors=True)
