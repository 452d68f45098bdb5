"""docker/ (no container engine): the images and the compose stack, checked as files.

Nothing here builds or starts a container. What is checked is what a wrong edit would break
on real hosts: images not pinned, a root user, a service without a health check, an image
that installs less than `make setup`, Kafka's durability settings, the bootstrap servers and
Spark master the loglake processes are given, the variables the `cluster` profile of
conf/loglake.yaml needs, names the code does not read, and secrets written into the file.
The expectations are read from the repo itself (Makefile, setup/, conf/, the code), so the
checks follow them.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILES = ("Dockerfile.spark", "Dockerfile.airflow")
CODE_DIRS = ("loglake", "spark_jobs", "dags", "plugins")

# Packages of setup/system-deps.sh that the images leave out on purpose, and why.
DEV_ONLY_PACKAGES = {"chromium": "headless Chromium drives the Airflow UI in the system tests only",
                     "nginx-light": "the tests' HTTPS proxy with a login in front of a schema registry"}

# Keys whose values are secrets: they may only come from docker/.env (`${VAR}`) or a file secret.
SECRET_KEY = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|JAAS|CREDENTIALS|FERNET|(^|_)KEY($|_)")
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


# --- reading the files ---------------------------------------------------------------------

@dataclass(frozen=True)
class Instruction:
    line: int
    op: str
    args: str


@cache
def dockerfile(name: str) -> tuple[Instruction, ...]:
    """The instructions of docker/<name>: continuation lines joined, comments dropped."""
    out, buf, start = [], "", 0
    for no, raw in enumerate((DOCKER / name).read_text().splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = no
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        op, _, args = buf.partition(" ")
        out.append(Instruction(start, op.upper(), args.strip()))
        buf = ""
    return tuple(out)


def instructions(name: str, op: str) -> list[Instruction]:
    return [i for i in dockerfile(name) if i.op == op]


def dockerfile_env(name: str) -> dict[str, str]:
    env = {}
    for ins in instructions(name, "ENV"):
        for token in shlex.split(ins.args):
            key, _, value = token.partition("=")
            env[key] = value
    return env


def runs(name: str) -> list[str]:
    """The shell text of every RUN (its --mount=... flags dropped)."""
    return [re.sub(r"^(--\S+\s+)+", "", i.args) for i in instructions(name, "RUN")]


@cache
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict[str, dict]:
    return compose()["services"]


def one_shot(svc: dict) -> bool:
    return str(svc.get("restart", "")) == "no"


def long_running() -> dict[str, dict]:
    return {n: s for n, s in services().items() if not one_shot(s)}


def built_from(svc: dict) -> str | None:
    build = svc.get("build")
    return Path(build["dockerfile"]).name if isinstance(build, dict) else None


def command(svc: dict) -> list[str]:
    cmd = svc.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def environment(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.partition("=")[::2] for e in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def full_env(svc: dict) -> dict[str, str]:
    """What a container of ``svc`` has: its image's ENV (for the images built here), then compose's."""
    image_env = dockerfile_env(built_from(svc)) if built_from(svc) else {}
    return {**image_env, **environment(svc)}


def runs_loglake_code(svc: dict) -> bool:
    """Airflow's services and the Spark image's drivers (not the standalone master and workers,
    nor the schema registry: its launcher reads no conf, it only starts the registry's JVM)."""
    image = built_from(svc)
    if image == "Dockerfile.airflow":
        return True
    registry = command(svc)[1:3] == ["-m", "loglake.local.schema_registry"]
    return image == "Dockerfile.spark" and command(svc)[:1] != ["spark-class"] and not registry


def kafka_services() -> dict[str, dict]:
    return {n: s for n, s in long_running().items() if str(s.get("image", "")).startswith("apache/kafka:")}


def makefile() -> tuple[dict[str, str], dict[str, tuple[list[str], list[str]]]]:
    """The Makefile's variables and targets (target -> (prerequisites, recipe lines))."""
    variables, targets, current = {}, {}, None
    for raw in (REPO / "Makefile").read_text().splitlines():
        if raw.startswith("\t") and current:
            targets[current][1].append(raw.strip())
            continue
        m = re.match(r"^([A-Za-z_]+)\s*(\?=|:=|=)\s*(.*)$", raw)
        if m:
            variables[m[1]] = m[3].strip()
            current = None
            continue
        m = re.match(r"^([^\s#:=][^:=]*):(?!=)\s*(.*)$", raw)
        if m and not raw.startswith("."):
            current = m[1].strip()
            targets[current] = (m[2].split(), [])
            continue
        if raw.strip() and not raw.startswith("#"):
            current = None

    def expand(text: str) -> str:
        for _ in range(5):
            text = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m[1], m[0]), text)
        return text

    variables = {k: expand(v) for k, v in variables.items()}
    return variables, {expand(t): ([expand(p) for p in pre], [expand(r) for r in rec])
                       for t, (pre, rec) in targets.items()}


def setup_recipe() -> list[str]:
    """Every recipe line `make setup` runs, prerequisites first."""
    _, targets = makefile()
    lines, seen = [], set()

    def visit(target: str) -> None:
        if target in seen or target not in targets:
            return
        seen.add(target)
        pre, recipe = targets[target]
        for p in pre:
            visit(p)
        lines.extend(r.lstrip("@-") for r in recipe)

    visit("setup")
    return lines


def system_packages() -> list[str]:
    return re.findall(r"need\+=\(([^)\s]+)\)", (REPO / "setup" / "system-deps.sh").read_text())


def names_read_by_code() -> set[str]:
    """LOGLAKE_* names the code uses (string constants, docstrings aside) or conf/loglake.yaml names."""
    names = set(ENV_REF.findall((REPO / "conf" / "loglake.yaml").read_text()))
    for d in CODE_DIRS:
        for path in (REPO / d).rglob("*.py"):
            tree = ast.parse(path.read_text())
            docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                          if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                          and n.body and isinstance(n.body[0], ast.Expr)
                          and isinstance(n.body[0].value, ast.Constant)}
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                        and re.fullmatch(r"LOGLAKE_[A-Z0-9_]+", node.value)):
                    names.add(node.value)
    return names


def cluster_profile() -> dict:
    return yaml.safe_load((REPO / "conf" / "loglake.yaml").read_text())["profiles"]["cluster"]


def env_refs(value) -> set[str]:
    if isinstance(value, dict):
        return set().union(*(env_refs(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(env_refs(v) for v in value)) if value else set()
    return set(ENV_REF.findall(value)) if isinstance(value, str) else set()


def pom_version(pom: Path, artifact: str) -> str:
    text = pom.read_text()
    m = re.search(rf"<artifactId>{re.escape(artifact)}</artifactId>\s*<version>([^<]+)</version>", text)
    assert m, f"{pom.relative_to(REPO)}: no dependency {artifact} with a <version>"
    return m[1].strip()


def image_tag(image: str) -> tuple[str, str | None]:
    """(name, tag) of ``image``; tag None when untagged (a digest counts as a tag)."""
    if "@sha256:" in image:
        return image.split("@")[0], image.split("@")[1]
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        return image, None
    return name, tag


# --- images: pinned, non-root, health-checked, installing what `make setup` installs ---------

PINNED_TAG = re.compile(r"^(\d+\.\d+(\.\d+)?([-._][A-Za-z0-9._-]+)?|RELEASE\.\d{4}-\d{2}-\d{2}T[\dZ-]+|sha256:[0-9a-f]{64})$")


def check_pinned(where: str, image: str) -> None:
    name, tag = image_tag(image)
    assert tag is not None, f"{where}: image {image!r} has no tag (that is `latest`): pin an exact version"
    assert "${" not in image, f"{where}: image {image!r} takes its tag from a variable: pin it in the file"
    assert tag != "latest" and PINNED_TAG.match(tag), (
        f"{where}: image {image!r}: tag {tag!r} is not an exact version (x.y[.z][-variant], RELEASE.<date>, a digest)")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_from_is_pinned(name):
    froms = instructions(name, "FROM")
    assert froms, f"docker/{name}: no FROM"
    stages = set()
    for ins in froms:
        parts = ins.args.split()
        image = next(p for p in parts if not p.startswith("--"))
        if image not in stages:
            check_pinned(f"docker/{name} line {ins.line} (FROM)", image)
        if len(parts) >= 3 and parts[-2].upper() == "AS":
            stages.add(parts[-1])


def test_every_compose_image_is_pinned():
    for name, svc in services().items():
        assert svc.get("image") or svc.get("build"), f"docker/compose.yaml: service {name}: neither image nor build"
        if svc.get("image"):
            check_pinned(f"docker/compose.yaml: service {name}, key image", str(svc["image"]))


def test_the_python_base_is_the_version_make_setup_requires():
    wanted = next(re.search(r"version_info\[:2\] == \((\d+), (\d+)\)", line).groups()
                  for line in setup_recipe() if "version_info" in line)
    for name in DOCKERFILES:
        base = instructions(name, "FROM")[0].args.split()[-1]
        _, tag = image_tag(base)
        assert base.startswith("python:") and tag.startswith(f"{wanted[0]}.{wanted[1]}."), (
            f"docker/{name}: FROM {base}: the Makefile's setup requires Python {'.'.join(wanted)} "
            f"(python:{wanted[0]}.{wanted[1]}.<patch>-...)")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_runs_as_non_root_with_healthcheck_and_workdir(name):
    users = instructions(name, "USER")
    assert users, f"docker/{name}: no USER: the container would run as root"
    last = users[-1].args
    assert re.fullmatch(r"\d+(:\d+)?", last) and int(last.split(":")[0]) != 0, (
        f"docker/{name} line {users[-1].line}: USER {last}: use a numeric uid other than 0")
    checks = instructions(name, "HEALTHCHECK")
    assert checks and checks[-1].args.split()[0].upper() != "NONE", f"docker/{name}: no HEALTHCHECK"
    assert instructions(name, "WORKDIR"), f"docker/{name}: no WORKDIR"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_installs_what_make_setup_installs(name):
    """Each step of the Makefile's setup target has its counterpart in the image: the pip
    installs in the Makefile's order, a `python -m` step (the jars) after the pinned set.

    A step the Makefile gains that is not known here fails: add it to both Dockerfiles, then here.
    """
    shell = runs(name)
    apt = " ".join(r for r in shell if "apt-get install" in r)
    pip_position, first_pip = -1, None
    modules = []
    for step in setup_recipe():
        if step.startswith("touch "):
            continue  # make's own stamp
        if step == "bash setup/system-deps.sh":
            for pkg in system_packages():
                if pkg not in DEV_ONLY_PACKAGES:
                    assert re.search(rf"(^|\s){re.escape(pkg)}(\s|$)", apt), (
                        f"docker/{name}: setup/system-deps.sh installs {pkg}, the image's apt-get install does not")
            continue
        if "version_info" in step:
            continue  # test_the_python_base_is_the_version_make_setup_requires
        m = re.search(r"-m (venv|pip install|[\w.]+)(.*)$", step)
        assert m, f"Makefile: setup step {step!r} is not known to {Path(__file__).name}: give both images that step"
        if m[1] == "pip install":
            args = [a for a in shlex.split(m[2]) if a not in ("-q", "--quiet")]
            found = [i for i, r in enumerate(shell) if "pip install" in r
                     and all(re.search(rf"(^|\s){re.escape(a)}(\s|$)", r) for a in args)]
            assert found, f"docker/{name}: no RUN with `pip install {' '.join(args)}` (Makefile: {step})"
            assert found[-1] >= pip_position, f"docker/{name}: `pip install {' '.join(args)}` runs out of the Makefile's order"
            pip_position = found[-1]
            first_pip = found[-1] if first_pip is None else first_pip
            continue
        wanted = "-m venv" if m[1] == "venv" else f"-m {m[1]}"
        found = [i for i, r in enumerate(shell) if wanted in r]
        assert found, f"docker/{name}: no RUN with python {wanted} at build time (Makefile: {step})"
        if m[1] != "venv":
            modules.append((wanted, found[-1]))
    for wanted, at in modules:
        assert first_pip is not None and at > first_pip, (
            f"docker/{name}: python {wanted} runs before the pinned set is installed")


def test_both_images_put_the_venv_and_the_jar_cache_at_the_same_paths():
    # Executors run the Python workers with the interpreter path the driver names, and the
    # class path entries the profile gives them: the same paths in both images.
    spark, airflow = dockerfile_env("Dockerfile.spark"), dockerfile_env("Dockerfile.airflow")
    for key in ("VIRTUAL_ENV", "LOGLAKE_CACHE"):
        assert spark.get(key) and spark.get(key) == airflow.get(key), (
            f"docker/Dockerfile.spark and Dockerfile.airflow: ENV {key} differ ({spark.get(key)!r} vs {airflow.get(key)!r})")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_build_context_holds_only_what_the_dockerfile_copies(name):
    ignore = DOCKER / f"{name}.dockerignore"
    assert ignore.exists(), f"docker/{name}.dockerignore missing: the whole repo (.venv, .git, docker/.env) would be sent"
    lines = [x.strip() for x in ignore.read_text().splitlines() if x.strip() and not x.startswith("#")]
    assert lines[0] == "*", f"docker/{name}.dockerignore: start with `*` and allow only what the Dockerfile copies"
    allowed = [x[1:].rstrip("/") for x in lines if x.startswith("!")]
    for ins in instructions(name, "COPY"):
        parts = [p for p in shlex.split(ins.args) if not p.startswith("--")]
        if "--from" in ins.args:
            continue
        for src in parts[:-1]:
            src = src.rstrip("/")
            assert any(src == a or src.startswith(a + "/") for a in allowed), (
                f"docker/{name} line {ins.line}: COPY {src}: not allowed by docker/{name}.dockerignore")
            assert (REPO / src).exists(), f"docker/{name} line {ins.line}: COPY {src}: no such path in the repo"
    for secret in (".venv", ".git", ".loglake", "docker/.env", "docker/secrets"):
        assert not any(secret == a or secret.startswith(a + "/") for a in allowed), (
            f"docker/{name}.dockerignore lets {secret} into the build context")


def test_airflow_requirements_are_pinned_and_installed():
    path = DOCKER / "requirements-airflow.txt"
    reqs = [x.split("#")[0].strip() for x in path.read_text().splitlines()]
    reqs = [r for r in reqs if r]
    for r in reqs:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+(\[[\w,]+\])?==[\w.]+", r), f"docker/requirements-airflow.txt: {r!r} is not pinned (==)"
    names = {re.split(r"[\[=]", r)[0].lower() for r in reqs}
    for needed in ("apache-airflow-providers-celery", "psycopg2-binary"):
        assert needed in names, f"docker/requirements-airflow.txt: {needed} missing"
    assert any("pip install" in r and "docker/requirements-airflow.txt" in r and "requirements.txt" in r.replace(
        "docker/requirements-airflow.txt", "") for r in runs("Dockerfile.airflow")), (
        "docker/Dockerfile.airflow: install requirements.txt and docker/requirements-airflow.txt in one pip run")


# --- compose: health, order, build context ------------------------------------------------

def test_every_long_running_service_has_a_healthcheck():
    for name, svc in long_running().items():
        check = svc.get("healthcheck") or {}
        test = check.get("test")
        assert test and not check.get("disable") and test != ["NONE"], (
            f"docker/compose.yaml: service {name}: no healthcheck (key healthcheck.test)")


def test_dependencies_wait_for_health_or_completion():
    all_services = services()
    for name, svc in all_services.items():
        deps = svc.get("depends_on") or {}
        assert isinstance(deps, dict), f"docker/compose.yaml: service {name}, key depends_on: give each a condition"
        for dep, spec in deps.items():
            assert dep in all_services, f"docker/compose.yaml: service {name}, key depends_on: no service {dep}"
            wanted = "service_completed_successfully" if one_shot(all_services[dep]) else "service_healthy"
            assert (spec or {}).get("condition") == wanted, (
                f"docker/compose.yaml: service {name}, key depends_on.{dep}.condition: expected {wanted}")


def test_builds_use_the_repo_root_as_context():
    for name, svc in services().items():
        build = svc.get("build")
        if build is None:
            continue
        assert (DOCKER / build["context"]).resolve() == REPO, (
            f"docker/compose.yaml: service {name}, key build.context: the repo root (..), found {build['context']!r}")
        assert (DOCKER / build["context"] / build["dockerfile"]).exists(), (
            f"docker/compose.yaml: service {name}, key build.dockerfile: {build['dockerfile']} does not exist")


# --- Kafka --------------------------------------------------------------------------------

def client_listeners(name: str, svc: dict) -> list[str]:
    """host:port of the listeners ``name`` advertises to clients (not the inter-broker one)."""
    env = environment(svc)
    inter = env.get("KAFKA_INTER_BROKER_LISTENER_NAME")
    out = []
    for listener in env.get("KAFKA_ADVERTISED_LISTENERS", "").split(","):
        lname, _, hostport = listener.partition("://")
        if lname and lname != inter:
            out.append(hostport)
    assert out, f"docker/compose.yaml: service {name}, key KAFKA_ADVERTISED_LISTENERS: no client listener"
    return out


def test_three_kafka_nodes_with_durable_settings():
    kafka = kafka_services()
    assert len(kafka) == 3, f"docker/compose.yaml: {len(kafka)} Kafka services ({', '.join(kafka)}), expected 3"
    wanted = {"KAFKA_DEFAULT_REPLICATION_FACTOR": "3", "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "3",
              "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3", "KAFKA_MIN_INSYNC_REPLICAS": "2",
              "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "2", "KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE": "false",
              "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false"}
    ids = {}
    for name, svc in kafka.items():
        env = environment(svc)
        for key, value in wanted.items():
            assert env.get(key, "").lower() == value, (
                f"docker/compose.yaml: service {name}, key {key}: expected {value}, found {env.get(key)!r}")
        ids[env.get("KAFKA_NODE_ID")] = svc.get("hostname", name)
    assert len(ids) == 3, f"docker/compose.yaml: the Kafka services' KAFKA_NODE_ID are not distinct: {sorted(ids)}"
    for name, svc in kafka.items():
        voters = environment(svc).get("KAFKA_CONTROLLER_QUORUM_VOTERS", "")
        got = {v.split("@")[0]: v.split("@")[1].split(":")[0] for v in voters.split(",") if "@" in v}
        assert got == ids, (f"docker/compose.yaml: service {name}, key KAFKA_CONTROLLER_QUORUM_VOTERS: {voters!r} "
                            f"does not name node id@host of each Kafka service {ids}")


def test_bootstrap_servers_are_the_brokers_advertised_listeners():
    advertised = sorted(hp for n, s in kafka_services().items() for hp in client_listeners(n, s))
    given = {n: environment(s)["LOGLAKE_KAFKA_BOOTSTRAP"] for n, s in services().items()
             if "LOGLAKE_KAFKA_BOOTSTRAP" in environment(s)}
    for name, svc in services().items():
        if runs_loglake_code(svc):
            assert name in given, f"docker/compose.yaml: service {name}: LOGLAKE_KAFKA_BOOTSTRAP not set"
    for name, value in given.items():
        assert sorted(value.split(",")) == advertised, (
            f"docker/compose.yaml: service {name}, key LOGLAKE_KAFKA_BOOTSTRAP: {value!r}, "
            f"but the brokers advertise {','.join(advertised)}")


def test_kafka_client_listener_speaks_what_the_cluster_profile_asks():
    security = cluster_profile()["kafka"].get("security")
    protocol = security.get("protocol", "SASL_SSL") if security else "PLAINTEXT"
    mechanism = security.get("mechanism", "SCRAM-SHA-512") if security else None
    for name, svc in kafka_services().items():
        env = environment(svc)
        protocols = dict(p.split(":") for p in env.get("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "").split(",") if p)
        inter = env.get("KAFKA_INTER_BROKER_LISTENER_NAME")
        for listener in env.get("KAFKA_ADVERTISED_LISTENERS", "").split(","):
            lname = listener.partition("://")[0]
            if lname and lname != inter:
                assert protocols.get(lname, lname) == protocol, (
                    f"docker/compose.yaml: service {name}, key KAFKA_LISTENER_SECURITY_PROTOCOL_MAP: listener {lname} "
                    f"is {protocols.get(lname, lname)}, the cluster profile's clients use {protocol}")
        if mechanism:
            assert mechanism in env.get("KAFKA_SASL_ENABLED_MECHANISMS", "").split(","), (
                f"docker/compose.yaml: service {name}, key KAFKA_SASL_ENABLED_MECHANISMS: lacks {mechanism} "
                f"(conf/loglake.yaml profiles.cluster.kafka.security.mechanism)")


def test_kafka_image_is_the_broker_version_setup_resolves():
    wanted = pom_version(REPO / "setup" / "pom-kafka.xml", "kafka_2.13")
    for name, svc in services().items():
        image = str(svc.get("image", ""))
        if image.startswith("apache/kafka:"):
            assert image_tag(image)[1] == wanted, (
                f"docker/compose.yaml: service {name}, key image: {image}, but setup/pom-kafka.xml resolves Kafka {wanted}")


def test_cluster_topics_are_replicated_as_the_brokers_require():
    """loglake creates its topics (auto-creation is off) with the profile's replication factor:
    below the brokers' min.insync.replicas no acks=all write succeeds."""
    kafka = cluster_profile()["kafka"]
    rf = int(kafka.get("replication_factor", 1))
    isr = int(kafka.get("min_insync_replicas") or 0)
    brokers = kafka_services()
    broker_isr = max(int(environment(s).get("KAFKA_MIN_INSYNC_REPLICAS", 1)) for s in brokers.values())
    assert broker_isr <= rf <= len(brokers), (
        f"conf/loglake.yaml profiles.cluster.kafka.replication_factor is {rf}: it must lie between the brokers' "
        f"KAFKA_MIN_INSYNC_REPLICAS ({broker_isr}, docker/compose.yaml) and the number of brokers ({len(brokers)})")
    assert isr <= rf, f"conf/loglake.yaml profiles.cluster.kafka.min_insync_replicas ({isr}) exceeds replication_factor ({rf})"


# --- Spark and Airflow --------------------------------------------------------------------

def test_spark_master_url_names_the_master_service():
    masters = {n: s for n, s in long_running().items() if "org.apache.spark.deploy.master.Master" in command(s)}
    assert len(masters) == 1, f"docker/compose.yaml: {len(masters)} Spark master services, expected 1"
    (mname, master), = masters.items()
    cmd = command(master)
    host = cmd[cmd.index("--host") + 1] if "--host" in cmd else master.get("hostname", mname)
    port = cmd[cmd.index("--port") + 1] if "--port" in cmd else "7077"
    assert host in (mname, master.get("hostname")), (
        f"docker/compose.yaml: service {mname}, key command: --host {host} is not the service's name")
    url = f"spark://{mname}:{port}"
    workers = {n: s for n, s in long_running().items() if "org.apache.spark.deploy.worker.Worker" in command(s)}
    assert len(workers) >= 2, f"docker/compose.yaml: {len(workers)} Spark workers, expected 2 or more"
    for name, svc in workers.items():
        assert url in command(svc), f"docker/compose.yaml: service {name}, key command: the worker does not join {url}"
    for name, svc in services().items():
        env = environment(svc)
        if runs_loglake_code(svc):
            assert env.get("LOGLAKE_SPARK_MASTER") == url, (
                f"docker/compose.yaml: service {name}, key LOGLAKE_SPARK_MASTER: expected {url}, found {env.get('LOGLAKE_SPARK_MASTER')!r}")
        if "AIRFLOW_CONN_LOGLAKE_SPARK" in env:
            conn = yaml.safe_load(env["AIRFLOW_CONN_LOGLAKE_SPARK"])
            assert conn.get("host") == url, (
                f"docker/compose.yaml: service {name}, key AIRFLOW_CONN_LOGLAKE_SPARK: host {conn.get('host')!r}, expected {url}")


def test_airflow_runs_celery_over_several_workers():
    airflow = {n: s for n, s in services().items() if built_from(s) == "Dockerfile.airflow"}
    assert airflow, "docker/compose.yaml: no service built from docker/Dockerfile.airflow"
    for name, svc in airflow.items():
        env = environment(svc)
        assert env.get("AIRFLOW__CORE__EXECUTOR") == "CeleryExecutor", (
            f"docker/compose.yaml: service {name}, key AIRFLOW__CORE__EXECUTOR: expected CeleryExecutor")
        assert env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "").startswith("postgresql"), (
            f"docker/compose.yaml: service {name}, key AIRFLOW__DATABASE__SQL_ALCHEMY_CONN: expected PostgreSQL")
        assert env.get("AIRFLOW__CELERY__BROKER_URL", "").startswith("redis://"), (
            f"docker/compose.yaml: service {name}, key AIRFLOW__CELERY__BROKER_URL: expected Redis")
        assert env.get("AIRFLOW__CORE__DAGS_FOLDER", "").endswith("/dags"), (
            f"docker/compose.yaml: service {name}, key AIRFLOW__CORE__DAGS_FOLDER: the repo's dags/")
    workers = [n for n, s in airflow.items() if command(s)[:3] == ["airflow", "celery", "worker"] and not one_shot(s)]
    assert len(workers) >= 2, f"docker/compose.yaml: {len(workers)} Celery worker services, expected 2 or more"
    hosts = [services()[w].get("hostname") for w in workers]
    for w in workers:
        env = environment(services()[w])
        # The worker is a client-mode Spark driver: executors connect back to it by this name.
        assert env.get("SPARK_LOCAL_HOSTNAME") == services()[w].get("hostname") == w, (
            f"docker/compose.yaml: service {w}: hostname and SPARK_LOCAL_HOSTNAME must both be {w}")
    assert len(set(hosts)) == len(hosts), f"docker/compose.yaml: Celery workers share a hostname: {hosts}"


def test_backfill_form_offers_the_configured_datasets():
    configured = {p.stem for p in (REPO / "conf" / "datasets").glob("*.yaml")}
    for name, svc in services().items():
        value = environment(svc).get("LOGLAKE_DATASETS")
        if value is not None:
            assert set(value.split(",")) == configured, (
                f"docker/compose.yaml: service {name}, key LOGLAKE_DATASETS: {value!r}, conf/datasets/ has {sorted(configured)}")


# --- the environment the code reads -------------------------------------------------------

def test_cluster_profile_variables_are_set_where_loglake_runs():
    needed = env_refs(cluster_profile())
    assert needed, "conf/loglake.yaml: the cluster profile names no ${VAR}"
    for name, svc in services().items():
        if runs_loglake_code(svc):
            missing = sorted(needed - full_env(svc).keys())
            assert not missing, (f"docker/compose.yaml: service {name}: {', '.join(missing)} not set "
                                 f"(conf/loglake.yaml profiles.cluster names them)")


def test_every_loglake_variable_set_is_read_by_the_code():
    known = names_read_by_code()
    places = [(f"docker/compose.yaml: service {n}", environment(s)) for n, s in services().items()]
    places += [(f"docker/{d} (ENV)", dockerfile_env(d)) for d in DOCKERFILES]
    for where, env in places:
        for key in env:
            if key.startswith("LOGLAKE_"):
                assert key in known, (f"{where}, key {key}: no code in {', '.join(CODE_DIRS)} and nothing in "
                                      f"conf/loglake.yaml reads it (a stale or misspelt name)")


def strings(value, path: str = ""):
    """(dotted key, text) of every string in a parsed compose value (anchors already merged)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from strings(v, f"{path}[{i}]")
    elif isinstance(value, str):
        yield path, value


def test_no_secret_is_written_into_compose():
    data = compose()
    secret_targets = {"/run/secrets/" + s for s in data.get("secrets", {})}
    for name, svc in services().items():
        mounted = set()
        for s in svc.get("secrets") or []:
            target = s if isinstance(s, str) else s.get("target", s["source"])
            mounted |= {target, Path(target).name, "/run/secrets/" + (s if isinstance(s, str) else s["source"])}
        for key, value in environment(svc).items():
            if SECRET_KEY.search(key):
                assert "${" in value or value in mounted or value in secret_targets, (
                    f"docker/compose.yaml: service {name}, key {key}: a literal value; take it from docker/.env "
                    f"(${{VAR:?message}}) or a file in docker/secrets/")
        for key, text in strings(svc):
            for m in re.finditer(r"(?i)\b(password|passwd|secret|token)\s*[=:]\s*\"?([^\s\"',\]}]+)", text):
                assert m[2].startswith("$"), (
                    f"docker/compose.yaml: service {name}, key {key}: {m[0]!r} holds a literal secret")
            for m in re.finditer(r"://([^/\s:@'\"]*):([^@\s'\"/]+)@", text):
                assert m[2].startswith("$"), f"docker/compose.yaml: service {name}, key {key}: a URL with a literal password"
            for m in re.finditer(r"\$\{([A-Za-z_]\w*)(:?[?-][^}]*)?\}", text):
                assert m[1] in example_variables(), (
                    f"docker/compose.yaml: service {name}, key {key}: ${{{m[1]}}} is not documented in docker/.env.example")


@cache
def example_variables() -> set[str]:
    lines = (DOCKER / ".env.example").read_text().splitlines()
    return {x.split("=", 1)[0].strip() for x in lines if "=" in x and not x.lstrip().startswith("#")}


def test_env_example_holds_placeholders_only():
    for line in (DOCKER / ".env.example").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            if SECRET_KEY.search(key) and not key.endswith("_ID"):
                assert value.startswith("change-me"), f"docker/.env.example, key {key}: use a change-me placeholder"


# --- Delta on the object store ------------------------------------------------------------

def test_cluster_profile_makes_concurrent_delta_commits_safe_on_s3():
    """Several drivers commit to the same tables (the speed streams, every Airflow task); on
    S3 only an external put-if-absent keeps two commits of one version from both landing."""
    roots = {environment(s).get("LOGLAKE_LAKE_ROOT", "") for s in services().values()}
    if not any(r.startswith(("s3a://", "s3://")) for r in roots):
        pytest.skip("the compose stack's lake is not on S3")
    conf = cluster_profile().get("spark", {}).get("conf") or {}
    assert conf.get("spark.delta.logStore.s3a.impl") == "io.delta.storage.S3DynamoDBLogStore", (
        "conf/loglake.yaml profiles.cluster.spark.conf: spark.delta.logStore.s3a.impl must be "
        "io.delta.storage.S3DynamoDBLogStore (the lake of docker/compose.yaml is on s3a://)")
    for key in ("spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName",
                "spark.io.delta.storage.S3DynamoDBLogStore.ddb.region", "spark.hadoop.fs.s3a.endpoint"):
        assert conf.get(key), f"conf/loglake.yaml profiles.cluster.spark.conf: {key} missing"


def test_s3_jars_match_delta_and_the_hadoop_pyspark_ships():
    pom = DOCKER / "s3-jars.pom.xml"
    delta = pom_version(REPO / "setup" / "pom-spark.xml", "delta-spark_2.13")
    assert pom_version(pom, "delta-storage-s3-dynamodb") == delta, (
        f"docker/s3-jars.pom.xml: delta-storage-s3-dynamodb must be {delta}, the delta-spark of setup/pom-spark.xml")
    spec = importlib.util.find_spec("pyspark")
    shipped = sorted((Path(list(spec.submodule_search_locations)[0]) / "jars").glob("hadoop-client-api-*.jar"))
    assert shipped, "pyspark ships no hadoop-client-api jar here"
    hadoop = re.search(r"hadoop-client-api-(.+)\.jar", shipped[0].name)[1]
    assert pom_version(pom, "hadoop-aws") == hadoop, (
        f"docker/s3-jars.pom.xml: hadoop-aws must be {hadoop}, the Hadoop of pyspark's {shipped[0].name}")
    for name in DOCKERFILES:
        assert any("s3-jars.pom.xml" in r and "copy-dependencies" in r for r in runs(name)), (
            f"docker/{name}: docker/s3-jars.pom.xml is not resolved at build time")


# --- what the images run ------------------------------------------------------------------

def loglake_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """The loglake.* modules ``module`` imports at its top level, transitively."""
    seen = set() if seen is None else seen
    if module in seen:
        return seen
    seen.add(module)
    path = REPO / (module.replace(".", "/") + ".py")
    for node in ast.parse(path.read_text()).body:
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "loglake":
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "loglake"]
        for name in names:
            loglake_imports(name if name != "loglake" else "loglake.__init__", seen)
    return seen


@pytest.mark.parametrize("name", DOCKERFILES)
def test_setup_jvm_runs_with_the_files_copied_before_it(name):
    """The jars are resolved before the rest of the code is copied (a code change does not
    resolve them again): what loglake.local.jars imports must be among the files copied first."""
    ins = dockerfile(name)
    at = next(i for i, x in enumerate(ins) if x.op == "RUN" and "-m loglake.local.jars" in x.args)
    copied = set()
    for x in ins[:at]:
        if x.op == "COPY":
            parts = [p for p in shlex.split(x.args) if not p.startswith("--")]
            copied |= {p.rstrip("/") for p in parts[:-1]}
    for module in sorted(loglake_imports("loglake.local.jars") | {"loglake.__init__"}):
        path = module.replace(".", "/") + ".py"
        assert path in copied or "loglake" in copied, (
            f"docker/{name}: {path} is not copied before `python -m loglake.local.jars` (line {ins[at].line}), "
            f"which imports it")
    assert "setup" in copied, f"docker/{name}: setup/ (the POMs) is not copied before `python -m loglake.local.jars`"


def test_health_checks_name_roles_the_helper_knows():
    spec = importlib.util.spec_from_file_location("loglake_container", DOCKER / "loglake-container.py")
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    for name, svc in services().items():
        test = (svc.get("healthcheck") or {}).get("test") or []
        if "/opt/loglake/docker/loglake-container.py" in test:
            rest = test[test.index("/opt/loglake/docker/loglake-container.py") + 1:]
            assert rest[:1] == ["health"], f"docker/compose.yaml: service {name}, key healthcheck.test: `health [ROLE]`"
            if len(rest) > 1:
                assert rest[1] in helper.CHECKS, (
                    f"docker/compose.yaml: service {name}, key healthcheck.test: role {rest[1]!r} unknown to "
                    f"docker/loglake-container.py ({', '.join(helper.CHECKS)})")


def test_every_writer_shares_the_lease_directory():
    """The dataset leases live on a filesystem (flock), the lake on S3: the streams (which
    hold their appends for a writer) and the Airflow workers (which take the leases) mount
    one volume at LOGLAKE_LOCK_ROOT, and the api-server (whose page shows the holders) too."""
    root = environment(services()["speed-job-views"]).get("LOGLAKE_LOCK_ROOT")
    assert root, "docker/compose.yaml: LOGLAKE_LOCK_ROOT is not set for the speed streams"
    writers = [n for n in services() if n.startswith(("speed-", "airflow-worker-"))] + ["airflow-api-server"]
    assert len(writers) >= 5
    volumes = set()
    for name in writers:
        svc = services()[name]
        assert environment(svc).get("LOGLAKE_LOCK_ROOT") == root, f"service {name}: LOGLAKE_LOCK_ROOT differs"
        mounts = {str(v).rpartition(":")[2]: str(v).partition(":")[0] for v in svc.get("volumes", [])}
        assert root in mounts, f"docker/compose.yaml: service {name} does not mount a volume at {root}"
        volumes.add(mounts[root])
    assert len(volumes) == 1 and volumes <= set(compose()["volumes"]), volumes
    for name in DOCKERFILES:  # the mount point exists, owned by the non-root user, in both images
        assert any(root in r and "chown" in r for r in runs(name)), f"docker/{name}: {root} not created"
