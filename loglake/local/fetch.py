"""What only the suite, the benchmarks, a registry dataset or an ``s3a://`` lake need, fetched
side by side: ``python -m loglake.local.fetch`` (``make setup-test``).

``make setup`` (and so ``make demo``) fetches what the default profile runs: Java and Maven if
missing, the venv, the broker's and Spark's jars. The rest is fetched by its own target or on
first use, each with a progress line:

- the schema registry (Apicurio Registry, built from Maven Central's jars): when ``loglake
  registry start``, or ``loglake up`` with a dataset in a registry format, first starts it
  (``loglake.local.apicurio``);
- the S3 jars (hadoop-aws, the AWS SDK bundle, loglake's Delta log store): when a command first
  runs on an ``s3a://`` lake (``jars.for_config``);
- versitygw, the S3 server the suite and the benchmarks run (``loglake.local.versitygw``);
- statsd_exporter, which takes Airflow's StatsD for Prometheus: when ``loglake up`` first starts
  it (``loglake.local.statsd_exporter``);
- the class-data archives of the Spark drivers and of the embedded broker
  (``loglake.local.cds``): faster JVM starts, never needed;
- Debian's Chromium, nginx, Prometheus and faketime: the suite's (``setup/test-deps.sh``).

Here they are fetched at once for the suite: the Debian packages, Maven's two sets (one after
the other: one resolver at a time shares ``~/.m2``), the Go builds and the archive, each in a
process of its own (the two Go builds take turns: one Go build at a time), their lines prefixed
by what they fetch. Each is a no-op when already done.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from loglake.core.paths import REPO_ROOT

STEPS = {
    "debian": ["bash", str(REPO_ROOT / "setup" / "test-deps.sh")],
    "maven": [sys.executable, "-m", "loglake.local.jars", "registry", "s3"],
    "versitygw": [sys.executable, "-m", "loglake.local.versitygw"],
    "statsd_exporter": [sys.executable, "-m", "loglake.local.statsd_exporter"],
    "cds": [sys.executable, "-m", "loglake.local.cds"],
}


def run(steps: dict[str, list[str]] = STEPS) -> int:
    """Run ``steps`` side by side, each line of their output printed with the step's name; 1
    when any failed (each one's failure is said), else 0."""
    t0 = time.monotonic()
    say = threading.Lock()
    codes: dict[str, int] = {}

    def step(name: str, cmd: list[str]) -> None:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, cwd=REPO_ROOT)
        for line in proc.stdout:
            with say:
                print(f"{name}: {line.rstrip()}", flush=True)
        codes[name] = proc.wait()
        with say:
            print(f"{name}: {'done' if codes[name] == 0 else f'FAILED (exit {codes[name]})'} "
                  f"in {time.monotonic() - started:.1f}s", flush=True)

    threads = [threading.Thread(target=step, args=item, name=f"fetch-{item[0]}") for item in steps.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = sorted(n for n, c in codes.items() if c != 0)
    print(f"setup-test: {'FAILED: ' + ', '.join(failed) if failed else 'ready'} in {time.monotonic() - t0:.1f}s",
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run())
