"""docker/: the images and the compose stack, checked as files (fast, no container engine).

The stack itself is built and started by `make compose-up` (and its run tested by `make
test-compose`); what is checked here is what a wrong edit would break on real hosts without a
build noticing: a base that is not `ARG BASE`, a root user, a service without a health check,
an image that installs less than `make setup`, Kafka's listeners, authorizer and durability, the
bootstrap servers and Spark master the loglake processes are given, the variables the `cluster`
profile of conf/loglake.yaml needs, ports published beyond what the host needs, a volume shared
between services, and secrets anywhere but in files. The expectations are read from the repo
itself (Makefile, setup/, conf/, the code, docker/kafka/kafka-node.py), so the checks follow them.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILES = tuple(sorted(p.name for p in DOCKER.glob("Dockerfile.*") if not p.name.endswith(".dockerignore")))
LOGLAKE_DOCKERFILE = "Dockerfile.loglake"
CODE_DIRS = ("loglake", "spark_jobs", "dags", "plugins")
PUBLIC_BASE = "debian:bookworm-slim"

# Packages of setup/system-deps.sh that the loglake images leave out on purpose, and why.
DEV_ONLY_PACKAGES = {"chromium": "headless Chromium drives the Airflow UI in the system tests only",
                     "nginx-light": "the tests' HTTPS proxy with a login in front of a schema registry",
                     "maven": "the jars are resolved in the build stage `jars`, which the images do not keep"}
# `python -m` steps of `make setup` the loglake images do without, and why.
NOT_IN_IMAGES = {"loglake.local.versitygw": "builds versitygw for the tests: the stack's store is its own image "
                                              "(docker/Dockerfile.versitygw)"}

SECRET_KEY = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|JAAS|CREDENTIALS|FERNET|(^|_)KEY($|_)|_CONN$|_URL$")
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# What the host needs, published on LOGLAKE_PUBLISH_ADDRESS: the UI and API, the brokers'
# EXTERNAL listeners, the S3 API (`loglake` on the host), and Prometheus's UI and API (the
# metrics and alerts of the stack, read-only: no admin API, no lifecycle endpoints).
PUBLISHED = {"airflow-api-server": {"8080"}, "kafka-1": {"19093"}, "kafka-2": {"19094"}, "kafka-3": {"19095"},
             "s3": {"7070"}, "prometheus": {"9090"}}
PROMETHEUS_DOCKERFILE = "Dockerfile.prometheus"
STATSD_DOCKERFILE = "Dockerfile.statsd-exporter"


# --- reading the files ---------------------------------------------------------------------

@dataclass(frozen=True)
class Instruction:
    line: int
    op: str
    args: str
    stage: str  # the stage's name (AS …), or its index


@cache
def dockerfile(name: str) -> tuple[Instruction, ...]:
    """The instructions of docker/<name>: continuation lines joined, comments dropped."""
    out, buf, start, stage, count = [], "", 0, "", 0
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
        if op.upper() == "FROM":
            parts = args.split()
            stage = parts[-1] if len(parts) >= 3 and parts[-2].upper() == "AS" else str(count)
            count += 1
        out.append(Instruction(start, op.upper(), args.strip(), stage))
        buf = ""
    return tuple(out)


def instructions(name: str, op: str) -> list[Instruction]:
    return [i for i in dockerfile(name) if i.op == op]


def stage_parents(name: str) -> dict[str, str]:
    """stage -> what it is FROM (another stage's name or an image)."""
    return {i.stage: next(p for p in i.args.split() if not p.startswith("--")) for i in instructions(name, "FROM")}


def stage_chain(name: str, stage: str) -> list[str]:
    """``stage`` and the stages it builds on, the base first."""
    parents, chain = stage_parents(name), [stage]
    while parents.get(chain[-1]) in parents:
        chain.append(parents[chain[-1]])
    return chain[::-1]


def in_stage(name: str, stage: str, op: str) -> list[Instruction]:
    """``op`` instructions that make up ``stage`` (its own and its parent stages')."""
    chain = stage_chain(name, stage)
    return [i for i in dockerfile(name) if i.op == op and i.stage in chain]


def env_of(name: str, stage: str) -> dict[str, str]:
    env = {}
    for ins in in_stage(name, stage, "ENV"):
        for token in shlex.split(ins.args):
            key, _, value = token.partition("=")
            env[key] = value
    return env


def shell_of(ins: Instruction) -> str:
    """The shell text of a RUN (its --mount=... flags dropped)."""
    return re.sub(r"^(--\S+\s+)+", "", ins.args)


@cache
def compose(defaults: bool = True) -> dict:
    """compose.yaml as Compose reads it with no docker/.env: ``${VAR:-default}`` as its default
    (``defaults=False``: the references as written)."""
    text = COMPOSE.read_text()
    if defaults:
        text = re.sub(r"\$\{([A-Za-z_]\w*):-([^}]*)\}", lambda m: m[2], text)
    return yaml.safe_load(text)


def services() -> dict[str, dict]:
    return compose()["services"]


def one_shot(svc: dict) -> bool:
    return str(svc.get("restart", "")) == "no"


def long_running() -> dict[str, dict]:
    return {n: s for n, s in services().items() if not one_shot(s)}


def build_of(svc: dict) -> tuple[str, str] | None:
    """(Dockerfile name, final stage) a service's image is built from."""
    build = svc.get("build")
    if not isinstance(build, dict):
        return None
    name = Path(build["dockerfile"]).name
    return name, build.get("target") or instructions(name, "FROM")[-1].stage


def command(svc: dict) -> list[str]:
    cmd = svc.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def environment(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.partition("=")[::2] for e in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def full_env(svc: dict) -> dict[str, str]:
    """What a container of ``svc`` has: its image's ENV, then compose's."""
    built = build_of(svc)
    return {**(env_of(*built) if built else {}), **environment(svc)}


def secret_targets(svc: dict) -> dict[str, str]:
    """secret name -> the path it is mounted at in the service's containers."""
    out = {}
    for s in svc.get("secrets") or []:
        name = s if isinstance(s, str) else s["source"]
        target = name if isinstance(s, str) else s.get("target", name)
        out[name] = target if target.startswith("/") else f"/run/secrets/{target}"
    return out


def runs_loglake_code(svc: dict) -> bool:
    """Airflow's services and the drivers and one-shots of the Spark image (not the standalone
    master and workers, nor the schema registry: its launcher reads no conf)."""
    built = build_of(svc)
    if built == (LOGLAKE_DOCKERFILE, "airflow"):
        return True
    registry = command(svc)[1:3] == ["-m", "loglake.local.apicurio"]
    return built == (LOGLAKE_DOCKERFILE, "spark") and command(svc)[:1] != ["spark-class"] and not registry


def runs_spark(svc: dict) -> bool:
    """A Spark master or worker, or a process that submits Spark jobs (a speed stream, a Celery worker)."""
    cmd = command(svc)
    return cmd[:1] == ["spark-class"] or cmd[-2:-1] == ["speed"] or cmd[:3] == ["airflow", "celery", "worker"]


def kafka_services() -> dict[str, dict]:
    return {n: s for n, s in long_running().items() if build_of(s) and build_of(s)[0] == "Dockerfile.kafka"}


@cache
def kafka_node():
    spec = importlib.util.spec_from_file_location("kafka_node", DOCKER / "kafka" / "kafka-node.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def node_properties(svc: dict, tmp: Path, monkeypatch) -> dict[str, str]:
    """The server.properties kafka-node.py writes for ``svc`` (its secrets stand-ins under ``tmp``)."""
    node = kafka_node()
    for name in secret_targets(svc):
        (tmp / name).write_text(f"stand-in-{name}")
    monkeypatch.setattr(node, "SECRETS", tmp)
    for key, value in environment(svc).items():
        monkeypatch.setenv(key, value)
    return node.properties()


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


# --- images: their base, non-root, health-checked --------------------------------------------

@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_stage_starts_from_arg_base_or_another_stage(name):
    """A user's build pulls the public image; docker/images.sh passes the local one when no
    registry answers (--build-arg BASE=loglake-base:bookworm)."""
    text = (DOCKER / name).read_text()
    assert not re.search(r"(?m)^#\s*syntax=", text), f"docker/{name}: a `# syntax=` line pulls a frontend image"
    args = [i for i in dockerfile(name) if i.op == "ARG" and i.args.startswith("BASE=")]
    assert args and dockerfile(name)[0] == args[0], f"docker/{name}: begin with ARG BASE={PUBLIC_BASE}"
    assert args[0].args == f"BASE={PUBLIC_BASE}", f"docker/{name}: ARG {args[0].args}: the default is {PUBLIC_BASE}"
    stages = set()
    for ins in instructions(name, "FROM"):
        image = next(p for p in ins.args.split() if not p.startswith("--"))
        assert image == "${BASE}" or image in stages, (
            f"docker/{name} line {ins.line}: FROM {image}: build from ${{BASE}} or an earlier stage")
        stages.add(ins.stage)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_images_run_as_non_root_with_a_healthcheck(name):
    final = instructions(name, "FROM")[-1].stage
    targets = {b[1] for s in services().values() if (b := build_of(s)) and b[0] == name} or {final}
    for stage in targets:
        users = in_stage(name, stage, "USER")
        assert users, f"docker/{name}, stage {stage}: no USER: the container would run as root"
        last = users[-1].args
        assert last.split(":")[0] not in ("0", "root"), f"docker/{name} line {users[-1].line}: USER {last}"
        checks = in_stage(name, stage, "HEALTHCHECK")
        assert checks and checks[-1].args.split()[0].upper() != "NONE", f"docker/{name}, stage {stage}: no HEALTHCHECK"


def test_every_service_image_is_built_here():
    """No image is pulled from a registry: each is built from a Dockerfile of docker/, with a pinned tag."""
    for name, svc in services().items():
        built = build_of(svc)
        assert built, f"docker/compose.yaml: service {name}: no build (an image pulled from a registry)"
        assert (DOCKER / built[0]).exists(), f"docker/compose.yaml: service {name}: docker/{built[0]} missing"
        assert built[1] in {i.stage for i in instructions(built[0], "FROM")}, (
            f"docker/compose.yaml: service {name}, key build.target: no stage {built[1]} in docker/{built[0]}")
        image, _, tag = str(svc.get("image", "")).rpartition(":")
        assert image.startswith("loglake-") and re.fullmatch(r"\d+(\.\d+)*", tag), (
            f"docker/compose.yaml: service {name}, key image: {svc.get('image')!r}: loglake-<name>:<version>")
        assert (DOCKER / svc["build"]["context"]).resolve() == REPO, (
            f"docker/compose.yaml: service {name}, key build.context: the repo root (..)")
    by_tag = {}
    for name, svc in services().items():
        by_tag.setdefault(svc["image"], set()).add(build_of(svc))
    for tag, builds in by_tag.items():
        assert len(builds) == 1, f"docker/compose.yaml: image {tag} is built from different Dockerfiles: {builds}"
    script = (DOCKER / "images.sh").read_text()
    for tag, ((dockerfile_name, target),) in by_tag.items():
        assert re.search(rf"{re.escape(tag)}\s+docker/{re.escape(dockerfile_name)}\s+({target}|-)(?=[\s\"])", script), (
            f"docker/images.sh does not build {tag} from docker/{dockerfile_name} (target {target})")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_build_context_holds_only_what_the_dockerfile_copies(name):
    ignore = DOCKER / f"{name}.dockerignore"
    assert ignore.exists(), f"docker/{name}.dockerignore missing: the whole repo (.venv, .git, secrets) would be sent"
    lines = [x.strip() for x in ignore.read_text().splitlines() if x.strip() and not x.startswith("#")]
    assert lines[0] == "*", f"docker/{name}.dockerignore: start with `*` and allow only what the Dockerfile copies"
    allowed = [x[1:].rstrip("/") for x in lines if x.startswith("!")]
    for ins in instructions(name, "COPY"):
        if "--from" in ins.args:
            continue
        parts = [p for p in shlex.split(ins.args) if not p.startswith("--")]
        for src in parts[:-1]:
            src = src.rstrip("/")
            assert any(src == a or src.startswith(a + "/") for a in allowed), (
                f"docker/{name} line {ins.line}: COPY {src}: not allowed by docker/{name}.dockerignore")
            assert (REPO / src).exists(), f"docker/{name} line {ins.line}: COPY {src}: no such path in the repo"
    for secret in (".venv", ".git", ".loglake", "docker/.env", "docker/secrets"):
        assert not any(secret == a or secret.startswith(a + "/") for a in allowed), (
            f"docker/{name}.dockerignore lets {secret} into the build context")


# --- the loglake images: what `make setup` installs ---------------------------------------

def test_loglake_images_install_what_make_setup_installs():
    """Each step of the Makefile's setup target has its counterpart in both targets: the pip
    installs in the Makefile's order, a `python -m` step after the pinned set. A step the
    Makefile gains that is not known here fails: add it to docker/Dockerfile.loglake, then here."""
    runs = [i for i in dockerfile(LOGLAKE_DOCKERFILE) if i.op == "RUN"]
    apt = " ".join(shell_of(i) for i in runs if "apt-get install" in i.args)
    for pkg in system_packages():
        if pkg not in DEV_ONLY_PACKAGES:
            assert re.search(rf"(^|\s){re.escape(pkg.replace('-jre-', '-jre-'))}(\s|$)", apt), (
                f"docker/{LOGLAKE_DOCKERFILE}: setup/system-deps.sh installs {pkg}, no apt-get install here does")
    for target in ("spark", "airflow"):
        chain = stage_chain(LOGLAKE_DOCKERFILE, target) + ["jars"]
        shell = [shell_of(i) for i in runs if i.stage in chain]
        pip_position, first_pip = -1, None
        for step in setup_recipe():
            if step.startswith(("touch ", "bash setup/system-deps.sh")) or "version_info" in step:
                continue
            # uv is the Makefile's installer of the pinned set (the same packages as pip's, faster);
            # the images install the same set with pip: uv's `pip install` is pip's there.
            if re.search(r"-m pip install .*\buv==", step):
                continue
            # The wheelhouse keeps a host's fresh clones from rebuilding pyspark's sdist (uv's
            # cache revalidates it on every install); an image builds it once, in its layer.
            if " setup/wheelhouse.py " in step:
                continue
            step = re.sub(r"-m uv pip install (.*?)--python \S+ ", r"-m pip install \1", step)
            step = re.sub(r" --find-links \S+", "", step)
            m = re.search(r"-m (venv|pip install|[\w.]+)(.*)$", step)
            assert m, f"Makefile: setup step {step!r} is not known to {Path(__file__).name}"
            if m[1] in NOT_IN_IMAGES:
                continue
            if m[1] == "pip install":
                args = [a for a in shlex.split(m[2]) if a not in ("-q", "--quiet")]
                found = [i for i, r in enumerate(shell) if "pip install" in r
                         and all(re.search(rf"(^|\s){re.escape(a)}(\s|$)", r) for a in args)]
                assert found, f"docker/{LOGLAKE_DOCKERFILE} ({target}): no `pip install {' '.join(args)}` ({step})"
                assert found[-1] >= pip_position, f"docker/{LOGLAKE_DOCKERFILE} ({target}): pip installs out of order"
                pip_position = found[-1]
                first_pip = found[0] if first_pip is None else first_pip
                continue
            wanted = "-m venv" if m[1] == "venv" else f"-m {m[1]}"
            found = [i for i, r in enumerate(shell) if wanted in r]
            assert found, f"docker/{LOGLAKE_DOCKERFILE} ({target}): no RUN with python {wanted} ({step})"
            if m[1] != "venv":
                assert first_pip is not None and found[-1] > first_pip, (
                    f"docker/{LOGLAKE_DOCKERFILE} ({target}): python {wanted} runs before the pinned set")


def test_python_in_the_images_is_the_version_make_setup_requires():
    wanted = next(re.search(r"version_info\[:2\] == \((\d+), (\d+)\)", line).groups()
                  for line in setup_recipe() if "version_info" in line)
    text = " ".join(shell_of(i) for i in in_stage(LOGLAKE_DOCKERFILE, "runtime", "RUN"))
    assert f"version_info[:2] == ({wanted[0]}, {wanted[1]})" in text, (
        f"docker/{LOGLAKE_DOCKERFILE}: the runtime stage does not check for Python {'.'.join(wanted)}")


def test_both_images_put_the_venv_and_the_jar_cache_at_the_same_paths():
    # Executors run the Python workers with the interpreter path the driver names, and the
    # class path entries loglake gives them: the same paths in both images.
    spark, airflow = env_of(LOGLAKE_DOCKERFILE, "spark"), env_of(LOGLAKE_DOCKERFILE, "airflow")
    for key in ("VIRTUAL_ENV", "LOGLAKE_CACHE", "SPARK_CONF_DIR"):
        assert spark.get(key) and spark.get(key) == airflow.get(key), (
            f"docker/{LOGLAKE_DOCKERFILE}: ENV {key} differs between spark and airflow")


def test_jars_are_resolved_with_the_files_copied_before_them():
    """The jars are resolved before the rest of the code is copied (a code change does not
    resolve them again): what loglake.local.jars imports is among the files copied first."""
    ins = in_stage(LOGLAKE_DOCKERFILE, "jars", "RUN")
    at = next(i for i in ins if "-m loglake.local.jars" in i.args)
    copied = set()
    for x in in_stage(LOGLAKE_DOCKERFILE, "jars", "COPY"):
        if x.line < at.line:
            parts = [p for p in shlex.split(x.args) if not p.startswith("--")]
            copied |= {p.rstrip("/") for p in parts[:-1]}
    tree = ast.parse((REPO / "loglake" / "local" / "jars.py").read_text())
    imported = {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("loglake")}
    for module in sorted(imported | {"loglake", "loglake.core", "loglake.local", "loglake.local.jars"}):
        path = module.replace(".", "/")
        path = f"{path}/__init__.py" if (REPO / path).is_dir() else f"{path}.py"
        assert path in copied or "loglake" in copied, (
            f"docker/{LOGLAKE_DOCKERFILE}: {path} is not copied before `python -m loglake.local.jars` (line {at.line})")
    assert "setup" in copied and "jvm" in copied, (
        f"docker/{LOGLAKE_DOCKERFILE}: setup/ (the POMs) and jvm/ (the log store) must be copied before the jars")


def test_airflow_requirements_are_pinned_and_installed_with_the_pinned_set():
    path = DOCKER / "requirements-airflow.txt"
    reqs = [r for r in (x.split("#")[0].strip() for x in path.read_text().splitlines()) if r]
    for r in reqs:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+(\[[\w,]+\])?==[\w.]+", r), f"docker/requirements-airflow.txt: {r!r} is not pinned"
    names = {re.split(r"[\[=]", r)[0].lower() for r in reqs}
    for needed in ("apache-airflow-providers-celery", "apache-airflow-providers-fab", "psycopg2-binary"):
        assert needed in names, f"docker/requirements-airflow.txt: {needed} missing"
    assert any("pip install" in r and "-r requirements.txt" in r and "-r docker/requirements-airflow.txt" in r
               for r in (shell_of(i) for i in in_stage(LOGLAKE_DOCKERFILE, "airflow", "RUN"))), (
        f"docker/{LOGLAKE_DOCKERFILE}: install requirements.txt and docker/requirements-airflow.txt in one pip run")


def test_kafka_image_runs_the_broker_setup_resolves():
    wanted = pom_version(REPO / "setup" / "pom-kafka.xml", "kafka_2.13")
    assert any("setup/pom-kafka.xml" in i.args for i in instructions("Dockerfile.kafka", "RUN")), (
        "docker/Dockerfile.kafka: the jars are not those of setup/pom-kafka.xml")
    for name, svc in kafka_services().items():
        assert svc["image"].endswith(f":{wanted}"), (
            f"docker/compose.yaml: service {name}, key image: {svc['image']}, but setup/pom-kafka.xml resolves {wanted}")


# --- compose: health, order ------------------------------------------------------------

def test_every_long_running_service_has_a_healthcheck():
    for name, svc in long_running().items():
        check = svc.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable") and check["test"] != ["NONE"], (
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
                assert rest[1] in helper.CHECKS, f"docker/compose.yaml: service {name}: role {rest[1]!r} unknown"


# --- Kafka: authenticated everywhere, ACLs, durable ----------------------------------------

def test_three_kafka_nodes_in_one_quorum():
    kafka = kafka_services()
    assert len(kafka) == 3, f"docker/compose.yaml: {len(kafka)} Kafka services ({', '.join(kafka)}), expected 3"
    ids = {environment(s)["KAFKA_NODE_ID"]: environment(s)["KAFKA_HOST"] for s in kafka.values()}
    assert len(ids) == 3, f"docker/compose.yaml: the Kafka services' KAFKA_NODE_ID are not distinct: {sorted(ids)}"
    for name, svc in kafka.items():
        env = environment(svc)
        assert env["KAFKA_HOST"] == svc.get("hostname") == name, f"docker/compose.yaml: service {name}: KAFKA_HOST"
        voters = env.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "")
        got = {v.split("@")[0]: v.split("@")[1].split(":")[0] for v in voters.split(",") if "@" in v}
        assert got == ids, f"docker/compose.yaml: service {name}: KAFKA_CONTROLLER_QUORUM_VOTERS {voters!r} != {ids}"


def test_every_kafka_listener_is_authenticated_and_an_authorizer_decides(tmp_path, monkeypatch):
    for name, svc in kafka_services().items():
        props = node_properties(svc, tmp_path, monkeypatch)
        protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
        listeners = [x.split("://")[0] for x in props["listeners"].split(",")]
        for listener in listeners:
            assert protocols[listener] == "SASL_SSL", f"{name}: listener {listener} is {protocols[listener]}"
        controller = props["controller.listener.names"]
        # Kafka takes PLAIN (or GSSAPI) on the controller listener: SCRAM's credentials live in the
        # metadata the controllers serve.
        assert props[f"listener.name.{controller.lower()}.sasl.enabled.mechanisms"] == "PLAIN"
        assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        assert props.get("allow.everyone.if.no.acl.found", "false") == "false"
        supers = set(props["super.users"].split(";"))
        assert supers == {"User:kafka-broker", "User:controller", "User:admin"}, supers
        assert f"User:{cluster_profile()['kafka']['security']['username'].strip('${}')}" not in supers
        mech = cluster_profile()["kafka"]["security"]["mechanism"]
        assert mech in props["sasl.enabled.mechanisms"].split(","), f"{name}: {mech} not enabled"
        for key, value in {"default.replication.factor": "3", "offsets.topic.replication.factor": "3",
                           "transaction.state.log.replication.factor": "3", "min.insync.replicas": "2",
                           "transaction.state.log.min.isr": "2", "unclean.leader.election.enable": "false",
                           "auto.create.topics.enable": "false"}.items():
            assert props[key] == value, f"{name}: {key}={props[key]}, expected {value}"
        assert all("stand-in-" not in v or "jaas" in k or "password" in k for k, v in props.items())


def test_bootstrap_servers_are_the_brokers_client_listeners(tmp_path, monkeypatch):
    advertised = []
    for name, svc in kafka_services().items():
        props = node_properties(svc, tmp_path, monkeypatch)
        advertised += [x.split("://")[1] for x in props["advertised.listeners"].split(",") if x.startswith("CLIENT://")]
    for name, svc in services().items():
        if runs_loglake_code(svc):
            value = environment(svc).get("LOGLAKE_KAFKA_BOOTSTRAP", "")
            assert sorted(value.split(",")) == sorted(advertised), (
                f"docker/compose.yaml: service {name}, key LOGLAKE_KAFKA_BOOTSTRAP: {value!r}, brokers advertise {advertised}")


def test_loglake_acls_cover_what_loglake_uses():
    """kafka-init grants loglake's user its datasets' topics, its groups (loglake-…, and Spark's
    Kafka source's spark-kafka-…) and its transactional ids; guest gets nothing."""
    spec = importlib.util.spec_from_file_location("loglake_container", DOCKER / "loglake-container.py")
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    granted = {(rtype, name) for rtype, name, _, _ in helper.ACLS}
    assert {("GROUP", "loglake-"), ("GROUP", "spark-kafka-"), ("TRANSACTIONAL_ID", "loglake-")} <= granted
    assert "kafka-init" in services() and command(services()["kafka-init"])[-1] == "kafka-init"
    assert "kafka_admin_password" in secret_targets(services()["kafka-init"])
    for name, svc in services().items():
        if name != "kafka-init" and not build_of(svc)[0] == "Dockerfile.kafka":
            assert "kafka_admin_password" not in secret_targets(svc), f"service {name} holds Kafka's admin password"


def test_cluster_topics_are_replicated_as_the_brokers_require():
    kafka = cluster_profile()["kafka"]
    rf, isr = int(kafka.get("replication_factor", 1)), int(kafka.get("min_insync_replicas") or 0)
    assert 2 <= rf <= len(kafka_services()) and isr <= rf, (rf, isr)


# --- Spark and Airflow --------------------------------------------------------------------

def test_spark_master_url_names_the_master_service():
    masters = {n: s for n, s in long_running().items() if "org.apache.spark.deploy.master.Master" in command(s)}
    assert len(masters) == 1, f"docker/compose.yaml: {len(masters)} Spark master services, expected 1"
    (mname, master), = masters.items()
    cmd = command(master)
    assert cmd[cmd.index("--host") + 1] == mname, f"docker/compose.yaml: service {mname}: --host is not its name"
    url = f"spark://{mname}:{cmd[cmd.index('--port') + 1]}"
    workers = {n: s for n, s in long_running().items() if "org.apache.spark.deploy.worker.Worker" in command(s)}
    assert len(workers) >= 2, f"docker/compose.yaml: {len(workers)} Spark workers, expected 2 or more"
    for name, svc in workers.items():
        assert url in command(svc), f"docker/compose.yaml: service {name}: the worker does not join {url}"
    for name, svc in services().items():
        env = environment(svc)
        if runs_loglake_code(svc):
            assert env.get("LOGLAKE_SPARK_MASTER") == url, f"docker/compose.yaml: service {name}: LOGLAKE_SPARK_MASTER"
        if "AIRFLOW_CONN_LOGLAKE_SPARK" in env:
            assert yaml.safe_load(env["AIRFLOW_CONN_LOGLAKE_SPARK"]).get("host") == url


def test_spark_rpc_is_authenticated_everywhere_spark_runs():
    """spark-defaults.conf in $SPARK_CONF_DIR is a secret file with spark.authenticate and its
    secret: the master, the workers and every process that submits read it (Spark 4.0 takes the
    secret *file* options only on YARN, Kubernetes and local masters, not spark://)."""
    maker = (DOCKER / "make-dev-secrets.sh").read_text()
    assert "spark.authenticate true" in maker and "spark.authenticate.secret " in maker
    for name, svc in services().items():
        if runs_spark(svc):
            conf_dir = full_env(svc).get("SPARK_CONF_DIR")
            assert conf_dir, f"docker/compose.yaml: service {name}: no SPARK_CONF_DIR"
            assert secret_targets(svc).get("spark_defaults") == f"{conf_dir}/spark-defaults.conf", (
                f"docker/compose.yaml: service {name}: the secret spark_defaults is not at {conf_dir}/spark-defaults.conf")
            assert not svc.get("ports"), f"docker/compose.yaml: service {name} publishes a port (Spark's UIs stay inside)"
    assert sum(runs_spark(s) for s in services().values()) >= 7, "master, 2 workers, 2 streams, 2 Celery workers"
    # Spark 4.1's master starts its REST submission server unless told not to, and refuses to start
    # at all beside spark.authenticate ("The RestSubmissionServer does not support authentication").
    masters = {n: s for n, s in services().items() if "org.apache.spark.deploy.master.Master" in command(s)}
    assert masters, "docker/compose.yaml: no Spark master"
    for name, svc in masters.items():
        assert "-Dspark.master.rest.enabled=false" in environment(svc).get("SPARK_MASTER_OPTS", "").split(), (
            f"docker/compose.yaml: service {name}, key SPARK_MASTER_OPTS: -Dspark.master.rest.enabled=false (its REST "
            f"server cannot run beside spark.authenticate)")


def test_airflow_runs_celery_with_the_fab_auth_manager():
    airflow = {n: s for n, s in services().items() if build_of(s) == (LOGLAKE_DOCKERFILE, "airflow")}
    assert airflow, "docker/compose.yaml: no Airflow service"
    for name, svc in airflow.items():
        env = environment(svc)
        assert env.get("AIRFLOW__CORE__EXECUTOR") == "CeleryExecutor", name
        assert env.get("AIRFLOW__CORE__AUTH_MANAGER") == \
            "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager", name
        for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CELERY__BROKER_URL", "AIRFLOW__CORE__FERNET_KEY",
                    "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
            assert key not in env, f"docker/compose.yaml: service {name}, key {key}: read it from a file ({key}_CMD)"
            cmd = env.get(f"{key}_CMD", "")
            target = cmd.split()[-1] if cmd.startswith("cat /run/secrets/") else None
            assert target and target in secret_targets(svc).values(), (
                f"docker/compose.yaml: service {name}, key {key}_CMD: `cat /run/secrets/<a secret it mounts>`")
    workers = [n for n, s in airflow.items() if command(s)[:3] == ["airflow", "celery", "worker"]]
    assert len(workers) >= 2, f"docker/compose.yaml: {len(workers)} Celery workers, expected 2 or more"
    for w in workers:
        # The worker is a client-mode Spark driver: executors connect back to it by this name.
        assert environment(services()[w]).get("SPARK_LOCAL_HOSTNAME") == services()[w].get("hostname") == w
    init = command(services()["airflow-init"])
    assert init[-1] == "airflow-init" and "airflow_users" in secret_targets(services()["airflow-init"])


def test_backfill_form_offers_the_configured_datasets():
    configured = {p.stem for p in (REPO / "conf" / "datasets").glob("*.yaml")}
    for name, svc in services().items():
        value = environment(svc).get("LOGLAKE_DATASETS")
        if value is not None:
            assert set(value.split(",")) == configured, f"docker/compose.yaml: service {name}: LOGLAKE_DATASETS"


# --- metrics: what Prometheus scrapes is what the services serve ----------------------------

def metrics_served(svc: dict) -> tuple[int, str | None] | None:
    """(port, the name it lists itself by: its ``loglake_process``) a service serves Prometheus
    metrics on: the platform's exporter (metrics) and the speed streams (speed-<dataset>) on the
    cluster profile's metrics.port and metrics.speed_port, statsd_exporter (statsd, as `loglake
    up` lists it) and Prometheus (no name) on their --web.listen-address; None for the others."""
    metrics = cluster_profile().get("metrics") or {}
    cmd = command(svc)
    if cmd[1:3] == ["-m", "loglake.local.metrics"]:
        return metrics.get("port"), "metrics"
    if cmd[-2:-1] == ["speed"]:
        return metrics.get("speed_port"), f"speed-{cmd[-1]}"
    built = build_of(svc)
    for dockerfile_name, default, name in ((PROMETHEUS_DOCKERFILE, 9090, None), (STATSD_DOCKERFILE, 9102, "statsd")):
        if built and built[0] == dockerfile_name:
            listen = [a for a in image_cmd(svc, dockerfile_name) if a.startswith("--web.listen-address=")]
            return (int(listen[-1].rsplit(":", 1)[1]) if listen else default), name
    return None


def image_cmd(svc: dict, dockerfile_name: str) -> list[str]:
    """What a container of ``svc`` runs: compose's command, else the CMD of docker/<dockerfile_name>."""
    if svc.get("command"):
        return command(svc)
    return json.loads(instructions(dockerfile_name, "CMD")[-1].args)


def prometheus_cmd(svc: dict) -> list[str]:
    return image_cmd(svc, PROMETHEUS_DOCKERFILE)


def copied_into_image(name: str) -> dict[str, str]:
    """path in the image -> the repo path a COPY of docker/<name> puts there (files only)."""
    out = {}
    for ins in instructions(name, "COPY"):
        if "--from" in ins.args:
            continue
        *sources, dest = [p for p in shlex.split(ins.args) if not p.startswith("--")]
        for src in sources:
            into_dir = dest.endswith("/") or len(sources) > 1
            out[str(PurePosixPath(dest) / Path(src).name) if into_dir else dest] = src
    return out


def test_prometheus_scrapes_what_the_services_serve_with_the_rules_it_is_given():
    """Every target of docker/prometheus/prometheus.yml is a compose service on the port it
    serves metrics on (for loglake's, the cluster profile's) and labelled with the name it lists
    itself by (LoglakeTargetDown reads `loglake_process`), every service that serves loglake's
    metrics is a target, the services listen on every address, and `rule_files` names the alert
    rules the image copies next to the configuration its CMD loads."""
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    proms = {n: s for n, s in services().items() if (build_of(s) or ("",))[0] == PROMETHEUS_DOCKERFILE}
    assert len(proms) == 1, f"docker/compose.yaml: {len(proms)} services built from docker/{PROMETHEUS_DOCKERFILE}"
    (pname, prom), = proms.items()
    scraped = set()
    for job in config["scrape_configs"]:
        assert set(job) <= {"job_name", "static_configs", "scrape_interval", "scrape_timeout", "metrics_path"}, (
            f"docker/prometheus/prometheus.yml: job {job['job_name']}: static targets only (the services' names)")
        for group in job["static_configs"]:
            for target in group["targets"]:
                host, _, port = target.rpartition(":")
                where = f"docker/prometheus/prometheus.yml: job {job['job_name']}, target {target}"
                assert host in services(), f"{where}: no compose service {host}"
                assert services()[host].get("hostname") == host, f"{where}: service {host} has another hostname"
                served = metrics_served(services()[host])
                assert served is not None, f"{where}: service {host} serves no metrics"
                assert int(port) == served[0], f"{where}: service {host} serves its metrics on {served[0]}"
                assert (group.get("labels") or {}).get("loglake_process") == served[1], (
                    f"{where}: label loglake_process {served[1]!r}, the name it lists itself by")
                scraped.add(host)
    loglake = {n for n, s in long_running().items() if n != pname and metrics_served(s) is not None}
    assert loglake and loglake <= scraped, f"docker/prometheus/prometheus.yml: {sorted(loglake - scraped)} not scraped"
    assert cluster_profile()["metrics"]["host"] == "0.0.0.0", (
        "conf/loglake.yaml profiles.cluster.metrics.host: 0.0.0.0, or Prometheus's container cannot reach them")

    copied = copied_into_image(PROMETHEUS_DOCKERFILE)
    loads = [a.partition("=")[2] for a in prometheus_cmd(prom) if a.startswith("--config.file=")]
    assert loads and copied.get(loads[-1]) == "docker/prometheus/prometheus.yml", (
        f"docker/{PROMETHEUS_DOCKERFILE}: the CMD's --config.file is not the copy of docker/prometheus/prometheus.yml")
    rules = [str(PurePosixPath(loads[-1]).parent / r) for r in config.get("rule_files") or []]
    assert rules and all(r in copied for r in rules), (
        f"docker/prometheus/prometheus.yml: rule_files {config.get('rule_files')} (in the image: {rules}) are not "
        f"among what docker/{PROMETHEUS_DOCKERFILE} copies: {sorted(copied)}")
    assert "docker/prometheus/loglake-alerts.yml" in {copied[r] for r in rules}
    # Its TSDB on the service's own volume (test_no_aws_service_and_no_volume_shared_between_services).
    tsdb = [a.partition("=")[2] for a in prometheus_cmd(prom) if a.startswith("--storage.tsdb.path=")]
    mounts = {str(v).split(":")[1] for v in prom.get("volumes") or []}
    assert tsdb and tsdb[-1] in mounts, f"docker/compose.yaml: service {pname}: no volume at its TSDB {tsdb}"


def statsd_services() -> dict[str, dict]:
    return {n: s for n, s in long_running().items() if (build_of(s) or ("",))[0] == STATSD_DOCKERFILE}


def test_airflow_sends_its_statsd_to_statsd_exporter_with_the_shipped_mapping():
    """Airflow's StatsD goes to the service that runs statsd_exporter, on the cluster profile's
    metrics.statsd_port, as `loglake up` sends it (statsd_env: InfluxDB-style tags, no legacy
    names), and Airflow starts after it (its client resolves the name once; a name that does not
    resolve is an error line in the process's output). A one-shot that runs before it
    (airflow-init) has StatsD off. The platform's exporter takes nothing in."""
    from loglake.local.airflow_env import statsd_env

    (exporter_name, _svc), = statsd_services().items()
    statsd_port = cluster_profile()["metrics"]["statsd_port"]
    wanted = statsd_env((exporter_name, statsd_port))
    for name, airflow in services().items():
        if build_of(airflow) != (LOGLAKE_DOCKERFILE, "airflow"):
            continue
        env = environment(airflow)
        waits = exporter_name in (airflow.get("depends_on") or {})
        if one_shot(airflow) and not waits:
            assert env.get("AIRFLOW__METRICS__STATSD_ON") == "False", (
                f"docker/compose.yaml: one-shot {name} runs before {exporter_name}: its StatsD must be off")
            continue
        got = {k: env.get(k) for k in wanted}
        assert got == wanted, f"docker/compose.yaml: service {name}: Airflow's StatsD settings {got}, expected {wanted}"
        assert waits, (f"docker/compose.yaml: service {name}: starts before {exporter_name} "
                       "(its StatsD name would not resolve)")
    for name, other in services().items():
        text = " ".join(command(other))
        assert "statsd" not in text.lower() or name == exporter_name, f"docker/compose.yaml: {name} takes StatsD"


def test_statsd_exporter_runs_as_loglake_up_runs_it_with_the_repos_mapping():
    """The statsd-exporter service is the binary `loglake up` builds (its version), with the same
    flags (loglake.local.statsd_exporter.command: UDP only, Airflow's tag syntax only), the UDP
    port of the cluster profile, and conf/statsd-mapping.yml mounted where the flag reads it."""
    from loglake.local import statsd_exporter

    (name, svc), = statsd_services().items()
    assert svc.get("hostname") == name
    assert svc["image"] == f"loglake-statsd-exporter:{statsd_exporter.VERSION}"
    args = {i.args.partition("=")[0]: i.args.partition("=")[2] for i in instructions(STATSD_DOCKERFILE, "ARG")}
    assert args.get("STATSD_EXPORTER_VERSION") == statsd_exporter.VERSION, (
        f"docker/{STATSD_DOCKERFILE}: ARG STATSD_EXPORTER_VERSION is not {statsd_exporter.VERSION}")
    build = " ".join(shell_of(i) for i in instructions(STATSD_DOCKERFILE, "RUN"))
    for arg in statsd_exporter.STATSD_EXPORTER.install_args()[1:]:
        arg = arg.replace(statsd_exporter.VERSION, "${STATSD_EXPORTER_VERSION}").replace("-ldflags=", "-ldflags=\"")
        assert arg in build, f"docker/{STATSD_DOCKERFILE}: `go install` without {arg} (loglake's build has it)"
    cmd = image_cmd(svc, STATSD_DOCKERFILE)
    flags = dict(a.partition("=")[::2] for a in cmd[1:])
    mapping = flags.get("--statsd.mapping-config")
    udp_port = cluster_profile()["metrics"]["statsd_port"]
    ours = statsd_exporter.command(cmd[0], mapping, "", udp_port, 9102)
    assert cmd == ours, f"docker/{STATSD_DOCKERFILE}: CMD {cmd}; `loglake up` runs {ours}"
    mounts = {c["target"]: compose()["configs"][c["source"]]["file"] for c in svc.get("configs") or []}
    assert mapping in mounts and (DOCKER / mounts[mapping]).resolve() == REPO / "conf" / statsd_exporter.MAPPING, (
        f"docker/compose.yaml: service {name}: conf/{statsd_exporter.MAPPING} is not mounted at {mapping}")


# --- the lake: an object store, no AWS, no shared volume ------------------------------------

def test_cluster_profile_keeps_the_lake_on_the_object_store():
    lake = cluster_profile()["lake"]
    assert "locks" not in lake, "conf/loglake.yaml profiles.cluster.lake.locks: the leases live on the store"
    store = lake.get("object_store") or {}
    for key in ("endpoint", "region", "credentials_file"):
        assert ENV_REF.search(str(store.get(key, ""))), f"conf/loglake.yaml profiles.cluster.lake.object_store.{key}"
    assert not cluster_profile().get("spark", {}).get("conf"), (
        "conf/loglake.yaml profiles.cluster.spark.conf: loglake sets S3A and the log store itself (lake.object_store)")
    for name, svc in services().items():
        if runs_loglake_code(svc):
            env = environment(svc)
            assert env["LOGLAKE_LAKE_ROOT"].startswith("s3a://") and env["LOGLAKE_CHECKPOINT_ROOT"].startswith("s3a://")
            assert env["LOGLAKE_S3_CREDENTIALS_FILE"] in secret_targets(svc).values(), name


def test_no_aws_service_and_no_volume_shared_between_services():
    text = "\n".join(p.read_text() for p in DOCKER.rglob("*") if p.is_file() and "secrets" not in p.parts)
    for word in ("dynamodb", "minio", "LOGLAKE_LOCK_ROOT", "amazonaws.com"):
        assert word.lower() not in text.lower(), f"docker/: {word} is still named"
    users = {}
    for name, svc in services().items():
        for v in svc.get("volumes") or []:
            source = str(v).partition(":")[0]
            assert source in compose()["volumes"], f"docker/compose.yaml: service {name}: {v} is not a named volume"
            users.setdefault(source, []).append(name)
    for volume, names in users.items():
        assert len(names) == 1, f"docker/compose.yaml: volume {volume} is mounted by {names}: no shared filesystem"


def test_cluster_profile_variables_are_set_where_loglake_runs():
    needed = env_refs(cluster_profile())
    assert needed, "conf/loglake.yaml: the cluster profile names no ${VAR}"
    for name, svc in services().items():
        if runs_loglake_code(svc):
            missing = sorted(needed - full_env(svc).keys())
            assert not missing, f"docker/compose.yaml: service {name}: {', '.join(missing)} not set"


def test_every_loglake_variable_set_is_read_by_the_code():
    known = names_read_by_code()
    places = [(f"docker/compose.yaml: service {n}", environment(s)) for n, s in services().items()]
    places += [(f"docker/{LOGLAKE_DOCKERFILE} (ENV, {t})", env_of(LOGLAKE_DOCKERFILE, t)) for t in ("spark", "airflow")]
    for where, env in places:
        for key in env:
            if key.startswith("LOGLAKE_"):
                assert key in known, f"{where}, key {key}: nothing in {', '.join(CODE_DIRS)} or conf/ reads it"


# --- secrets: files only; published ports --------------------------------------------------

def test_secrets_are_files_never_values():
    """No secret in compose.yaml nor in any environment: the keys that look secret hold a path
    under /run/secrets or a `cat` of one; ${VAR}s are the documented non-secret settings."""
    declared = compose().get("secrets", {})
    documented = {x.split("=", 1)[0].strip() for x in (DOCKER / ".env.example").read_text().splitlines()
                  if "=" in x and not x.lstrip().startswith("#")}
    readme = (DOCKER / "secrets" / "README.md").read_text()
    maker = (DOCKER / "make-dev-secrets.sh").read_text()
    for secret, spec in declared.items():
        file = Path(spec["file"]).name
        assert spec["file"].startswith("./secrets/"), f"docker/compose.yaml: secret {secret}: a file in docker/secrets/"
        assert f"`{file}`" in readme, f"docker/secrets/README.md does not describe {file}"
        assert re.search(rf"(^|[\s\"']){re.escape(file)}([\s\"']|$)", maker, re.M), (
            f"docker/make-dev-secrets.sh does not make {file}")
    for name, svc in services().items():
        mounted = secret_targets(svc)
        for secret in mounted:
            assert secret in declared, f"docker/compose.yaml: service {name}: secret {secret} is not declared"
        for key, value in environment(svc).items():
            if SECRET_KEY.search(key) and key not in ("LOGLAKE_REGISTRY_URL", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
                                                      "LOGLAKE_KAFKA_USERNAME"):
                target = value.split()[-1] if value else ""
                assert target in mounted.values(), (
                    f"docker/compose.yaml: service {name}, key {key}: a secret must be a file it mounts under /run/secrets")
        for key, text in strings(svc):
            assert not re.search(r"://[^/\s:@'\"]*:[^@\s'\"/]+@", text), f"docker/compose.yaml: {name}.{key}: a URL with a password"
            for m in ENV_REF.finditer(text):
                assert m[1] in documented, f"docker/compose.yaml: {name}.{key}: ${{{m[1]}}} is not in docker/.env.example"
            for m in re.finditer(r"\$\{([A-Za-z_]\w*)(:?[?-][^}]*)?\}", text):
                assert m[1] in documented and not SECRET_KEY.search(m[1]), (
                    f"docker/compose.yaml: {name}.{key}: ${{{m[1]}}}: settings from the environment are not secrets")
    for line in (DOCKER / ".env.example").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            assert not SECRET_KEY.search(line.split("=", 1)[0]), f"docker/.env.example: {line}: secrets are files"


def test_only_what_the_host_needs_is_published_on_the_publish_address():
    for name, svc in services().items():
        ports = [str(p) for p in svc.get("ports") or []]
        assert {p.rsplit(":", 1)[-1] for p in ports} == PUBLISHED.get(name, set()), (
            f"docker/compose.yaml: service {name} publishes {ports}; the host needs {PUBLISHED.get(name, 'none')}")
        for p in (str(p) for p in compose(defaults=False)["services"][name].get("ports") or []):
            assert p.startswith("${LOGLAKE_PUBLISH_ADDRESS:-127.0.0.1}:"), (
                f"docker/compose.yaml: service {name}: {p}: bind to ${{LOGLAKE_PUBLISH_ADDRESS:-127.0.0.1}}")
    store = " ".join(command(services()["s3"])) + (DOCKER / "versitygw" / "entrypoint.sh").read_text()
    assert "--webui" not in store and "--admin-port" not in store, "versitygw: no WebUI, no admin port"
