"""Images, compose files and Kubernetes manifests agree with the code they deploy.

Structural checks only (no container engine): every file parses; ports, probe paths,
commands, profiles and mounts match what the gateway and the workers really use. When
`docker compose`/`docker-compose`, `kubectl` or `promtool` are installed, their own
validators run too; otherwise those parts skip with the reason.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gateway.config import DEFAULT_MODEL, VLLM_OMNI_COMMAND, ServerConfig, load_config
from gateway.worker.profile import load_deploy_profile
from gateway.types import PoolName

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
K8S = DOCKER / "k8s"
PROFILES = REPO / "profiles"
DASHBOARDS = REPO / "dashboards"

GATEWAY_PORT = ServerConfig().port  # 8000
WORKER_PORT = 8091  # DiscoveryConfig().port, the worker image's --port
CONFIG_PATH = "/etc/higgs-gateway/gateway.yaml"
DATA_DIR = "/var/lib/higgs-gateway"
DEEP_GEMM = {"VLLM_USE_DEEP_GEMM": "0", "VLLM_MOE_USE_DEEP_GEMM": "0"}
POOL_PROFILE = {
    PoolName.LOW_LATENCY: "higgs_multimodal_qwen3_low_latency.yaml",
    PoolName.HIGH_THROUGHPUT: "higgs_multimodal_qwen3_high_throughput.yaml",
}


def gateway_routes() -> set[str]:
    from gateway.api.health import create_router

    router = create_router(None, None, None, "any_pool")  # type: ignore[arg-type]  # only the paths are read

    return {route.path for route in router.routes}  # type: ignore[attr-defined]


def test_probe_paths_exist_in_the_gateway() -> None:
    assert {"/health", "/ready", "/metrics"} <= gateway_routes()


# ---- Dockerfiles ----------------------------------------------------------------------


def dockerfile(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (DOCKER / name).read_text()
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, rest = full.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def args_of(instructions: list[tuple[str, str]], keyword: str) -> list[str]:
    return [rest for kw, rest in instructions if kw == keyword]


def env_of(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in args_of(instructions, "ENV"):
        for token in shlex.split(rest):
            key, _, value = token.partition("=")
            env[key] = value
    return env


def json_form(rest: str) -> list[str]:
    """An exec-form argument (JSON array), after any --options (HEALTHCHECK's)."""
    return json.loads(rest[rest.index("[") :])


def arg_defaults(instructions: list[tuple[str, str]]) -> dict[str, str]:
    return dict(rest.split("=", 1) for rest in args_of(instructions, "ARG") if "=" in rest)


def final_base(instructions: list[tuple[str, str]]) -> str:
    base = args_of(instructions, "FROM")[-1].split()[0]
    return re.sub(r"\$\{(\w+)\}", lambda m: arg_defaults(instructions)[m.group(1)], base)


def copy_sources(instructions: list[tuple[str, str]]) -> list[str]:
    sources = []
    for rest in args_of(instructions, "COPY"):
        if rest.startswith("--from"):
            continue
        sources += rest.split()[:-1]
    return sources


def ignored(ignore_file: Path, source: str) -> bool:
    """Enough of .dockerignore semantics for "exclude all, re-include a list" files."""
    patterns = [p.strip() for p in ignore_file.read_text().splitlines() if p.strip() and not p.startswith("#")]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern.lstrip("!").rstrip("/")
        if body == "*" or source.rstrip("/") == body or source.startswith(body + "/"):
            excluded = not negate
    return excluded


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


PINNED_BASE = r"(?P<tag>[\w./-]+:[\w.-]+)@sha256:[0-9a-f]{64}"  # an exact tag and its digest


def stages(instructions: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (FROM to the next FROM)."""
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions:
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, rest))
    return found


def test_gateway_image() -> None:
    ins = dockerfile("gateway.Dockerfile")
    pinned = re.fullmatch(PINNED_BASE, final_base(ins))
    assert pinned and re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", pinned["tag"])
    assert json_form(args_of(ins, "CMD")[-1]) == ["higgs-gateway", "serve", "--config", CONFIG_PATH]
    user = args_of(ins, "USER")[-1].split(":")[0]
    assert user not in ("root", "0")
    assert DATA_DIR in json_form(args_of(ins, "VOLUME")[-1])
    assert str(GATEWAY_PORT) in args_of(ins, "EXPOSE")
    # The in-cluster discovery client and the tracing SDK come with the image; the
    # emulator's speech library does not (serving never loads it).
    extras = pyproject()["project"]["optional-dependencies"]
    installed = image_extras(ins)
    assert {"kubernetes", "tracing"} <= installed <= extras.keys()
    assert "emulator" not in installed


def image_extras(instructions: list[tuple[str, str]], build_args: dict[str, str] | None = None) -> set[str]:
    """The extras the image's pip install line names, ``${EXTRAS}`` resolved from its ARG default."""
    values = arg_defaults(instructions) | (build_args or {})
    install = next(rest for rest in args_of(instructions, "RUN") if "higgs_gateway-" in rest)
    found = re.search(r"\.whl\)\[([^]]+)\]", install)
    assert found
    named = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], found[1])
    return set(named.split(","))


def test_the_demo_images_speak() -> None:
    # compose's demo and the Kubernetes demo overlay build the image with the emulator extra.
    ins = dockerfile("gateway.Dockerfile")
    build = compose("compose.demo.yaml")["services"]["gateway"]["build"]
    assert image_extras(ins, build["args"]) == image_extras(ins) | {"emulator"}
    overlay = (K8S / "overlays" / "demo" / "kustomization.yaml").read_text()
    assert "--build-arg EXTRAS=kubernetes,tracing,emulator" in overlay


def test_gateway_image_runs_under_an_init_process() -> None:
    # Kubernetes has no `docker run --init`: tini from Debian is PID 1 in every runtime,
    # so compose no longer adds its own init (which would put tini under another init).
    ins = dockerfile("gateway.Dockerfile")
    runtime = stages(ins)[-1]
    assert any(re.search(r"apt-get install .*\btini\b", rest) for kw, rest in runtime if kw == "RUN")
    assert json_form(args_of(ins, "ENTRYPOINT")[-1]) == ["tini", "--"]
    for name in COMPOSE_FILES:
        assert "init" not in compose(name)["services"]["gateway"], name


def test_gateway_image_installs_under_its_constraints() -> None:
    ins = dockerfile("gateway.Dockerfile")
    ignore = DOCKER / "gateway.Dockerfile.dockerignore"
    # Every stage that runs pip has PIP_CONSTRAINT (pip's -c) naming the copied lock file.
    for stage in stages(ins):
        if not any("pip " in rest for kw, rest in stage if kw == "RUN"):
            continue
        copies = {rest.split()[-1]: rest.split()[0] for kw, rest in stage if kw == "COPY" and not rest.startswith("--")}
        constraint = arg_defaults(stage)["PIP_CONSTRAINT"]
        assert copies[constraint] == "docker/constraints.txt"
        assert not ignored(ignore, "docker/constraints.txt")
        # Declared before the first pip command of the stage.
        first_pip = next(i for i, (kw, rest) in enumerate(stage) if kw == "RUN" and "pip " in rest)
        assert any(kw == "ARG" and rest.startswith("PIP_CONSTRAINT=") for kw, rest in stage[:first_pip])


def run_healthcheck(command: list[str], port: int | None) -> int:
    env = {"PATH": os.environ["PATH"]} | ({"HIGGS_GATEWAY_SERVER__PORT": str(port)} if port else {})
    return subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, timeout=20, check=False).returncode


def test_gateway_healthcheck_follows_the_configured_port() -> None:
    health = json_form(args_of(dockerfile("gateway.Dockerfile"), "HEALTHCHECK")[-1])
    assert health[:2] == ["python", "-c"]
    # The variable it reads is the one the gateway takes its port from.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HIGGS_GATEWAY_SERVER__PORT", "9137")
        assert load_config(DOCKER / "config" / "gateway.image.yaml").server.port == 9137
    assert "HIGGS_GATEWAY_SERVER__PORT" in health[2] and f"'{GATEWAY_PORT}'" in health[2]  # the image's default

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert run_healthcheck(health, port) == 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert run_healthcheck(health, port) != 0  # nothing answers there any more


def pins(path: Path) -> dict[str, Requirement]:
    """name -> exact pin of a compiled constraints file (markers kept)."""
    found = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            requirement = Requirement(line)
            (spec,) = requirement.specifier  # one exact version each
            assert spec.operator == "==", line
            found[canonicalize_name(requirement.name)] = requirement
    return found


def assert_locked(requirements: list[str], locked: dict[str, Requirement], python: str) -> None:
    for text in requirements:
        wanted = Requirement(text)
        if wanted.marker is not None and not wanted.marker.evaluate({"python_version": python, "extra": ""}):
            continue
        pin = locked.get(canonicalize_name(wanted.name))
        assert pin is not None, f"{wanted.name} is not locked: run scripts/lock-images.sh"
        version = next(iter(pin.specifier)).version
        assert wanted.specifier.contains(version, prereleases=True), (
            f"{wanted.name}=={version} does not satisfy {wanted.specifier}: run scripts/lock-images.sh"
        )


def test_gateway_constraints_lock_what_the_image_installs() -> None:
    project = pyproject()
    # The serving image's extras and the demo builds' emulator extra, all under one lock.
    extras = image_extras(dockerfile("gateway.Dockerfile")) | {"emulator"}
    wanted = list(project["project"]["dependencies"]) + list(project["build-system"]["requires"])
    for extra in sorted(extras):
        wanted += project["project"]["optional-dependencies"][extra]
    constraints = DOCKER / "constraints.txt"
    assert "scripts/lock-images.sh" in constraints.read_text().splitlines()[1]  # how to regenerate it
    assert_locked(wanted, pins(constraints), "3.11")


def test_worker_constraints_lock_the_worker_extra() -> None:
    ins = dockerfile("worker.Dockerfile")
    install = next(rest for rest in args_of(ins, "RUN") if "vllm-omni" in rest)
    constraint = re.search(r"(?:-c|--constraint)[ =](\S+)", install)
    assert constraint
    copies = {rest.split()[-1]: rest.split()[0] for kw, rest in ins if kw == "COPY" and not rest.startswith("--")}
    assert copies[constraint[1]] == "docker/worker-constraints.txt"
    assert not ignored(DOCKER / "worker.Dockerfile.dockerignore", "docker/worker-constraints.txt")
    locked = pins(DOCKER / "worker-constraints.txt")
    assert_locked(pyproject()["project"]["optional-dependencies"]["worker"], locked, "3.12")
    # The whole tree, not only the two names: torch and the CUDA libraries are locked too.
    assert {"torch", "transformers", "flashinfer-python"} <= locked.keys()


def test_gateway_image_build_context() -> None:
    ins = dockerfile("gateway.Dockerfile")
    sources = copy_sources(ins)
    assert pyproject()["project"]["readme"] in sources  # setuptools needs it to build
    ignore = DOCKER / "gateway.Dockerfile.dockerignore"
    for source in sources:
        assert not ignored(ignore, source), f"{source} is excluded from the build context"
        if source != "README.md":  # written by the lead; the build needs it
            assert (REPO / source).exists(), source
    assert ignored(ignore, ".venv") and ignored(ignore, "tests")


def test_gateway_image_default_config() -> None:
    config = load_config(DOCKER / "config" / "gateway.image.yaml")
    assert config.server.host == "0.0.0.0" and config.server.port == GATEWAY_PORT
    assert str(config.data_dir) == DATA_DIR


def test_worker_image() -> None:
    ins = dockerfile("worker.Dockerfile")
    pinned = re.fullmatch(PINNED_BASE, final_base(ins))
    assert pinned and re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-devel-ubuntu\d+\.\d+", pinned["tag"])
    env = env_of(ins)
    assert {k: env.get(k) for k in DEEP_GEMM} == DEEP_GEMM
    # The same pins as the package's `worker` extra.
    worker_extra = set(pyproject()["project"]["optional-dependencies"]["worker"])
    installs = " ".join(args_of(ins, "RUN"))
    assert worker_extra == {pin for pin in worker_extra if f'"{pin}"' in installs}
    # Weights come from the cache volume, never from a build step.
    assert env["HF_HOME"] in json_form(args_of(ins, "VOLUME")[-1])
    assert not re.search(r"snapshot_download|huggingface-cli|hf download", installs)
    assert "profiles/" in copy_sources(ins)
    assert not ignored(DOCKER / "worker.Dockerfile.dockerignore", "profiles/")
    health = json_form(args_of(ins, "HEALTHCHECK")[-1])
    assert f"http://127.0.0.1:{WORKER_PORT}/health" in health[2]
    assert str(WORKER_PORT) in args_of(ins, "EXPOSE")


def worker_entrypoint_argv(profile: str | None) -> subprocess.CompletedProcess[str]:
    """Run the image's ENTRYPOINT shell with `vllm-omni` replaced by a printer of its argv."""
    entrypoint = json_form(args_of(dockerfile("worker.Dockerfile"), "ENTRYPOINT")[-1])
    assert entrypoint[:2] == ["tini", "--"] and entrypoint[2:4] == ["/bin/sh", "-c"]
    script = entrypoint[4].replace("exec vllm-omni", 'exec printf "%s\\n" vllm-omni', 1)
    env = {"PATH": os.environ["PATH"]} | ({"HIGGS_PROFILE": profile} if profile else {})
    return subprocess.run(
        ["/bin/sh", "-c", script, *entrypoint[5:], "--served-model-name", "tts"],
        capture_output=True, text=True, env=env, timeout=10, check=False,
    )  # fmt: skip


def test_worker_entrypoint_is_the_real_serve_command() -> None:
    done = worker_entrypoint_argv("higgs_multimodal_qwen3_low_latency.yaml")
    assert done.returncode == 0, done.stderr
    argv = done.stdout.splitlines()
    assert argv[:3] == ["vllm-omni", "serve", DEFAULT_MODEL]
    assert argv[argv.index("--deploy-config") + 1] == "/profiles/higgs_multimodal_qwen3_low_latency.yaml"
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == str(WORKER_PORT)
    # Every fixed flag of the supervisor's launch command is there too.
    fixed = [a for a in VLLM_OMNI_COMMAND if a.startswith("--") and a != "--served-model-name"]
    assert set(fixed) <= set(argv)
    assert argv[-2:] == ["--served-model-name", "tts"]  # extra args are passed through


def test_worker_entrypoint_needs_a_profile() -> None:
    done = worker_entrypoint_argv(None)
    assert done.returncode != 0 and "HIGGS_PROFILE" in done.stderr


# ---- compose --------------------------------------------------------------------------


def with_defaults(value: Any) -> Any:
    """Compose's ${VAR:-default} interpolation with nothing set in the environment; a
    required ${VAR:?message} becomes "${VAR}", so tests can see where a value comes from."""
    if isinstance(value, str):
        return re.sub(
            r"\$\{(\w+)(?::?([-?])([^}]*))?\}",
            lambda m: f"${{{m[1]}}}" if m[2] == "?" else (m[3] or ""),
            value,
        )
    if isinstance(value, list):
        return [with_defaults(v) for v in value]
    if isinstance(value, dict):
        return {k: with_defaults(v) for k, v in value.items()}
    return value


def compose(name: str) -> dict[str, Any]:
    return with_defaults(yaml.safe_load((DOCKER / name).read_text()))


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path, for bind mounts (relative to docker/)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts[target] = (DOCKER / source).resolve()
    return mounts


def named_volumes(service: dict[str, Any]) -> dict[str, str]:
    return {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", []) if not v.startswith((".", "/"))}


def gpu_devices(service: dict[str, Any]) -> list[dict[str, Any]]:
    return service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])


def prometheus_config(compose_file: str) -> tuple[dict[str, Any], dict[str, Path]]:
    service = compose(compose_file)["services"]["prometheus"]
    mounts = bind_mounts(service)
    return yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text()), mounts


def scrape_targets(config: dict[str, Any]) -> dict[str, list[tuple[str, dict[str, str]]]]:
    jobs: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                jobs.setdefault(job["job_name"], []).append((target, static.get("labels", {})))
    return jobs


COMPOSE_FILES = ["compose.yaml", "compose.demo.yaml"]
# What compose files require (${VAR:?...}): a Grafana password, the gateway's API keys.
REQUIRED_COMPOSE_ENV = {"GRAFANA_ADMIN_PASSWORD": "not-a-real-password", "HIGGS_API_KEY_SHA256": '["' + "0" * 64 + '"]'}


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_common(name: str) -> None:
    spec = compose(name)
    services = spec["services"]
    assert {"gateway", "prometheus", "grafana"} <= services.keys()
    for service_name, service in services.items():
        for source in (bind_mounts(service)).values():
            if DASHBOARDS in source.parents or source == DASHBOARDS:
                continue  # checked in test_compose_grafana_and_alerts
            assert source.exists(), f"{name}: {service_name} mounts missing {source}"
        for volume in named_volumes(service).values():
            assert volume in spec.get("volumes", {}), f"{name}: undeclared volume {volume}"
        if "build" in service:
            assert (REPO / service["build"]["dockerfile"]).exists()
            assert (DOCKER / service["build"]["context"]).resolve() == REPO
    gateway = services["gateway"]
    assert any(str(p).endswith(f"{GATEWAY_PORT}:{GATEWAY_PORT}") for p in gateway["ports"])
    assert named_volumes(gateway).get(DATA_DIR)
    assert "HIGGS_GATEWAY_ADMIN_TOKEN" in gateway["environment"]

    config, _ = prometheus_config(name)
    jobs = scrape_targets(config)
    assert jobs["higgs-gateway"] == [(f"gateway:{GATEWAY_PORT}", {})]  # no `pool`: the series have it
    assert config["rule_files"] == ["/etc/prometheus/rules/alerts.yml"]


def test_compose_gpu_machine() -> None:
    services = compose("compose.yaml")["services"]
    gateway = services["gateway"]
    config_file = bind_mounts(gateway)[CONFIG_PATH]
    assert gateway["command"][-1] == CONFIG_PATH
    config = load_config(config_file)
    assert str(config.data_dir) == DATA_DIR and config.server.host == "0.0.0.0"

    workers = {name: s for name, s in services.items() if "HIGGS_PROFILE" in s.get("environment", {})}
    assert len(workers) == 2
    seen_gpus = set()
    for worker in workers.values():
        assert {k: worker["environment"][k] for k in DEEP_GEMM} == DEEP_GEMM
        profile = worker["environment"]["HIGGS_PROFILE"]
        assert (PROFILES / profile).exists()
        (device,) = gpu_devices(worker)
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        seen_gpus.update(device["device_ids"])
        assert named_volumes(worker)["/models/huggingface"] == "hf-cache"
        assert worker.get("shm_size")
    assert len(seen_gpus) == 2, "each worker gets its own GPU"

    # Each pool's static URL is the compose worker running that pool's profile.
    scraped = dict(scrape_targets(prometheus_config("compose.yaml")[0])["higgs-workers"])
    for pool, pool_config in config.pools.items():
        (url,) = pool_config.workers
        host, port = url.removeprefix("http://").split(":")
        assert int(port) == WORKER_PORT
        assert workers[host]["environment"]["HIGGS_PROFILE"] == Path(pool_config.profile).name == POOL_PROFILE[pool]
        assert scraped[f"{host}:{port}"] == {"pool": pool.value}


def test_compose_demo_needs_no_gpu() -> None:
    from gateway.demo import build_parser

    services = compose("compose.demo.yaml")["services"]
    assert not any(gpu_devices(s) for s in services.values())
    command = services["gateway"]["command"]
    assert command[:2] == ["higgs-gateway", "demo"]
    args = build_parser().parse_args([str(a) for a in command[2:]])
    assert (args.host, args.port, args.data_dir) == ("0.0.0.0", GATEWAY_PORT, DATA_DIR)


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_grafana_and_alerts(name: str) -> None:
    services = compose(name)["services"]
    prometheus = bind_mounts(services["prometheus"])
    grafana = bind_mounts(services["grafana"])
    needed = [
        DASHBOARDS / "alerts.yml",
        DASHBOARDS / "provisioning" / "datasources",
        DASHBOARDS / "provisioning" / "dashboards",
    ]
    missing = [str(p.relative_to(REPO)) for p in needed if not p.exists()]
    if missing:
        pytest.skip(f"dashboards not written yet: {missing}")
    assert prometheus["/etc/prometheus/rules/alerts.yml"] == DASHBOARDS / "alerts.yml"
    assert grafana["/etc/grafana/provisioning/datasources"] == needed[1]
    assert grafana["/etc/grafana/provisioning/dashboards"] == needed[2]
    # Every dashboard provider reads a folder mounted from dashboards/, which holds the JSON.
    for provider_file in needed[2].glob("*.y*ml"):
        for provider in yaml.safe_load(provider_file.read_text())["providers"]:
            folder = grafana.get(provider["options"]["path"])
            assert folder is not None, f"{provider_file.name}: {provider['options']['path']} is not mounted"
            assert list(folder.glob("*.json")), f"no dashboard JSON in {folder}"
    # Every datasource points at the compose Prometheus.
    for source_file in needed[1].glob("*.y*ml"):
        for source in yaml.safe_load(source_file.read_text())["datasources"]:
            if source["type"] == "prometheus":
                assert source["url"] == "http://prometheus:9090"
    assert "127.0.0.1:9090:9090" in services["prometheus"]["ports"]


def compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_config_validates(name: str) -> None:
    cli = compose_cli()
    if cli is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **REQUIRED_COMPOSE_ENV}
    done = subprocess.run(
        [*cli, "-f", str(DOCKER / name), "config", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_compose_replicas_share_state_through_redis() -> None:
    services = compose("compose.replicas.yaml")["services"]
    redis, gateway = services["redis"], services["gateway"]
    assert "--appendonly" in redis["command"] and named_volumes(redis)["/data"] == "redis-data"
    assert gateway["depends_on"]["redis"]["condition"] == "service_healthy"
    env = gateway["environment"]
    base = compose("compose.yaml")["services"]["gateway"]
    config = load_config(bind_mounts(base)[CONFIG_PATH], {"state": {"backend": env["HIGGS_GATEWAY_STATE__BACKEND"], "redis_url": env["HIGGS_GATEWAY_STATE__REDIS_URL"]}})
    assert config.state.backend == "redis"
    assert config.state.redis_url is not None and "//redis:6379" in config.state.redis_url.get_secret_value()
    # Each replica its own data directory (a per-container volume), never one shared folder.
    assert DATA_DIR in gateway["volumes"]
    # One required password: Redis runs with it, its health check and the gateways use it.
    command = redis["command"]
    assert command[command.index("--requirepass") + 1] == "${HIGGS_REDIS_PASSWORD}"
    assert redis["environment"]["REDISCLI_AUTH"] == env["HIGGS_GATEWAY_STATE__REDIS_PASSWORD"] == "${HIGGS_REDIS_PASSWORD}"
    # The same memory ceiling and policy as the Kubernetes manifest, under the container's limit.
    k8s_redis = container(one(tuple(yaml.safe_load_all((K8S / "base" / "redis.yaml").read_text())), "Deployment", "higgs-redis"))
    for option in ("--maxmemory", "--maxmemory-policy"):
        assert command[command.index(option) + 1] == k8s_redis["args"][k8s_redis["args"].index(option) + 1]
    assert redis_bytes(command[command.index("--maxmemory") + 1]) < quantity_bytes(redis["mem_limit"])
    cli = compose_cli()
    if cli is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    env_vars = {
        "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "GATEWAY_PORTS": "8000-8002",
        "HIGGS_REDIS_PASSWORD": "not-a-real-password", **REQUIRED_COMPOSE_ENV,
    }  # fmt: skip
    done = subprocess.run(
        [*cli, "-f", str(DOCKER / "compose.yaml"), "-f", str(DOCKER / "compose.replicas.yaml"), "config", "-q"],
        capture_output=True, text=True, env=env_vars, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_compose_replicas_scrape_every_replica() -> None:
    config, mounts = prometheus_config("compose.replicas.yaml")
    assert mounts["/etc/prometheus/prometheus.yml"].name == "prometheus.replicas.yml"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    # One address per container from Docker's DNS, not one replica per scrape.
    assert jobs["higgs-gateway"]["dns_sd_configs"] == [{"names": ["gateway"], "type": "A", "port": 8000, "refresh_interval": "15s"}]
    assert "static_configs" not in jobs["higgs-gateway"]
    single, _ = prometheus_config("compose.yaml")
    assert scrape_targets(config)["higgs-workers"] == scrape_targets(single)["higgs-workers"]


def test_compose_tracing_sends_the_gateways_spans_to_jaeger(monkeypatch: pytest.MonkeyPatch) -> None:
    services = compose("compose.tracing.yaml")["services"]
    jaeger, gateway = services["jaeger"], services["gateway"]
    assert jaeger["image"].startswith("jaegertracing/all-in-one:") and not jaeger["image"].endswith(":latest")
    assert jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert "127.0.0.1:16686:16686" in jaeger["ports"]
    assert "jaeger" in gateway["depends_on"]
    # The variables reach real config keys: the mounted config plus them turns tracing on.
    for key, value in gateway["environment"].items():
        monkeypatch.setenv(key, str(value))
    base = compose("compose.yaml")["services"]["gateway"]
    tracing = load_config(bind_mounts(base)[CONFIG_PATH]).tracing
    assert tracing.enabled and tracing.protocol == "http/protobuf" and tracing.sample_ratio == 1.0
    assert tracing.endpoint == "http://jaeger:4318"  # Jaeger's OTLP/HTTP port; the exporter adds /v1/traces
    # The image can export (the SDK is in the tracing extra it installs: test_gateway_image).
    cli = compose_cli()
    if cli is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **REQUIRED_COMPOSE_ENV}
    for base_file in COMPOSE_FILES:
        done = subprocess.run(
            [*cli, "-f", str(DOCKER / base_file), "-f", str(DOCKER / "compose.tracing.yaml"), "config", "-q"],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{base_file}: {done.stderr}"


@pytest.mark.parametrize("name", ["prometheus.yml", "prometheus.demo.yml", "prometheus.replicas.yml"])
def test_prometheus_configs_validate(name: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    done = subprocess.run(
        [promtool, "check", "config", "--syntax-only", str(DOCKER / "prometheus" / name)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheus_kubernetes_config_labels() -> None:
    # Distribution builds of promtool may lack Kubernetes SD, so this one is checked by hand.
    config = yaml.safe_load((DOCKER / "prometheus" / "kubernetes.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"higgs-gateway", "higgs-workers"}
    assert not any(r.get("target_label") == "pool" for r in jobs["higgs-gateway"]["relabel_configs"])
    assert any(r.get("target_label") == "pool" for r in jobs["higgs-workers"]["relabel_configs"])


# ---- Kubernetes -----------------------------------------------------------------------


def test_k8s_files_parse() -> None:
    files = sorted(K8S.rglob("*.yaml"))
    assert files
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if path.parent.name in ("profiles", "config"):  # generator inputs, not objects
                continue
            assert doc and "apiVersion" in doc and "kind" in doc, path


def test_k8s_profiles_are_the_repo_profiles() -> None:
    kustomization = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    (generator,) = [g for g in kustomization["configMapGenerator"] if g["name"] == "higgs-worker-profiles"]
    listed = {Path(f).name for f in generator["files"]}
    deploy_profiles = {p.name for p in PROFILES.glob("higgs_*.yaml")}
    assert listed == deploy_profiles
    for name in listed:
        assert (K8S / "base" / "profiles" / name).read_bytes() == (PROFILES / name).read_bytes(), name


@cache
def kustomize(target: str) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (kustomize builds not checked)")
    done = subprocess.run([kubectl, "kustomize", target], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def find(docs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    (doc,) = find(docs, kind, name)
    return doc


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def port_number(c: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in c["ports"] if p["name"] == port)


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def volume_configmap(deployment: dict[str, Any], mount_path: str) -> str | None:
    c = container(deployment)
    mount = next((m for m in c.get("volumeMounts", []) if m["mountPath"] == mount_path), None)
    if mount is None:
        return None
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    return volume.get("configMap", {}).get("name")


OVERLAYS = ["base", "overlays/gpu", "overlays/demo", "overlays/gpu-keda", "overlays/gpu-hpa"]


@pytest.mark.parametrize("target", OVERLAYS)
def test_k8s_gateway(target: str) -> None:
    docs = kustomize(str(K8S / target))
    deployment = one(docs, "Deployment", "higgs-gateway")
    spec = deployment["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    # The demo is one gateway on its data directory; the others several on one Redis.
    assert spec["replicas"] == 1 if target == "overlays/demo" else spec["replicas"] >= 2
    c = container(deployment)
    assert c["command"] == ["higgs-gateway", "serve", "--config", CONFIG_PATH]
    assert port_number(c, "http") == GATEWAY_PORT
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert port_number(c, c["readinessProbe"]["httpGet"]["port"]) == GATEWAY_PORT
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == str(GATEWAY_PORT)
    env = {e["name"]: e for e in c["env"]}
    assert env["HIGGS_GATEWAY_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "admin-token"

    service = one(docs, "Service", "higgs-gateway")
    assert selects(service["spec"]["selector"], pod_labels)
    assert service["spec"]["ports"][0]["port"] == GATEWAY_PORT
    pdb = one(docs, "PodDisruptionBudget", "higgs-gateway")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)

    # Demo: the data directory on its own ReadWriteOnce claim. Otherwise a per-pod cache
    # (an emptyDir) of the state the replicas share through Redis.
    data = next(m for m in c["volumeMounts"] if m["mountPath"] == DATA_DIR)
    volume = next(v for v in spec["template"]["spec"]["volumes"] if v["name"] == data["name"])
    if target == "overlays/demo":
        claim = one(docs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert spec["strategy"]["type"] == "Recreate"
    else:
        assert "emptyDir" in volume and "persistentVolumeClaim" not in volume

    # RBAC: its service account may list and watch EndpointSlices.
    account = spec["template"]["spec"]["serviceAccountName"]
    binding = next(b for b in find(docs, "RoleBinding") if any(s["name"] == account for s in b["subjects"]))
    role = one(docs, "Role", binding["roleRef"]["name"])
    rule = next(r for r in role["rules"] if "endpointslices" in r["resources"])
    assert rule["apiGroups"] == ["discovery.k8s.io"] and {"list", "watch"} <= set(rule["verbs"])


def access_modes(docs: tuple[dict[str, Any], ...]) -> list[list[str]]:
    """Every claim's access modes: PVCs, StatefulSet templates and pods' ephemeral claims."""
    modes = [d["spec"]["accessModes"] for d in find(docs, "PersistentVolumeClaim")]
    for workload in docs:
        if workload["kind"] not in ("Deployment", "StatefulSet"):
            continue
        pod = workload["spec"]["template"]["spec"]
        modes += [v["ephemeral"]["volumeClaimTemplate"]["spec"]["accessModes"] for v in pod.get("volumes", []) if "ephemeral" in v]
        modes += [t["spec"]["accessModes"] for t in workload["spec"].get("volumeClaimTemplates", [])]
    return modes


@pytest.mark.parametrize("target", OVERLAYS)
def test_k8s_needs_no_read_write_many_storage(target: str) -> None:
    # Most clusters have no ReadWriteMany storage class; a claim asking for it stays Pending.
    docs = kustomize(str(K8S / target))
    modes = access_modes(docs)
    assert modes and all(m == ["ReadWriteOnce"] for m in modes), modes
    assert "ReadWriteMany" not in json.dumps(docs)


@pytest.mark.parametrize("target", OVERLAYS)
def test_k8s_gateway_state_backend(target: str) -> None:
    docs = kustomize(str(K8S / target))
    deployment = one(docs, "Deployment", "higgs-gateway")
    config_map = one(docs, "ConfigMap", volume_configmap(deployment, "/etc/higgs-gateway") or "")
    env = {e["name"]: e for e in container(deployment)["env"]}
    document = yaml.safe_load(config_map["data"][Path(CONFIG_PATH).name])
    if "HIGGS_GATEWAY_STATE__BACKEND" in env:
        document["state"]["backend"] = env["HIGGS_GATEWAY_STATE__BACKEND"]["value"]
    state = load_config(None, document).state
    if target == "overlays/demo":
        assert state.backend == "local"
        assert not find(docs, "Deployment", "higgs-redis") and not find(docs, "Service", "higgs-redis")
        return
    assert state.backend == "redis" and state.redis_url is not None
    host_port = state.redis_url.get_secret_value().split("://", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    service = one(docs, "Service", host)
    redis = one(docs, "Deployment", "higgs-redis")
    assert selects(service["spec"]["selector"], redis["spec"]["template"]["metadata"]["labels"])
    assert service["spec"]["ports"][0]["port"] == int(port)
    assert redis["spec"]["replicas"] == 1 and redis["spec"]["strategy"]["type"] == "Recreate"
    args = container(redis)["args"]
    assert args[args.index("--appendonly") + 1] == "yes"  # a restart keeps the voices
    (data,) = redis["spec"]["template"]["spec"]["volumes"]
    claim = one(docs, "PersistentVolumeClaim", data["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # A managed Redis's URL (with its password) comes from an optional Secret.
    secret = env["HIGGS_GATEWAY_STATE__REDIS_URL"]["valueFrom"]["secretKeyRef"]
    assert secret["optional"] is True


@pytest.mark.parametrize("target", OVERLAYS)
def test_k8s_gateway_config_finds_the_workers(target: str) -> None:
    docs = kustomize(str(K8S / target))
    deployment = one(docs, "Deployment", "higgs-gateway")
    config_map = one(docs, "ConfigMap", volume_configmap(deployment, "/etc/higgs-gateway") or "")
    profiles = one(docs, "ConfigMap", volume_configmap(deployment, "/profiles") or "")
    env = {e["name"] for e in container(deployment)["env"]}
    config = yaml.safe_load(config_map["data"][Path(CONFIG_PATH).name])
    validated = load_config(None, config)
    assert str(validated.data_dir) == DATA_DIR and validated.server.port == GATEWAY_PORT
    for pool, pool_config in validated.pools.items():
        discovery = pool_config.discovery
        assert discovery.mode in ("kubernetes", "dns")
        # The gateway reads the very profile the pool's workers run.
        assert pool_config.profile == f"/profiles/{POOL_PROFILE[pool]}"
        assert POOL_PROFILE[pool] in profiles["data"]
        assert f"HIGGS_GATEWAY_POOLS__{pool.value.upper()}__DISCOVERY__NAMESPACE" in env
        service = one(docs, "Service", discovery.service or discovery.dns_name or "")
        assert service["spec"]["clusterIP"] == "None"  # headless: one endpoint per worker
        assert service["spec"]["ports"][0]["port"] == discovery.port == WORKER_PORT
        workers = [
            d
            for d in find(docs, "Deployment")
            if selects(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
        ]
        (worker,) = workers
        worker_env = {e["name"]: e.get("value") for e in container(worker)["env"]}
        assert worker_env["HIGGS_PROFILE"] == POOL_PROFILE[pool]
        assert worker["spec"]["template"]["metadata"]["labels"]["higgs-gateway/pool"] == pool.value


@pytest.mark.parametrize("target", OVERLAYS)
def test_k8s_workers(target: str) -> None:
    docs = kustomize(str(K8S / target))
    workers = [
        d for d in find(docs, "Deployment") if d["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"
    ]
    assert len(workers) == 2
    for worker in workers:
        c = container(worker)
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert {k: env.get(k) for k in DEEP_GEMM} == DEEP_GEMM
        profile_map = one(docs, "ConfigMap", volume_configmap(worker, "/profiles") or "")
        assert env["HIGGS_PROFILE"] in profile_map["data"]
        load_deploy_profile(PROFILES / env["HIGGS_PROFILE"])  # a valid deploy profile
        assert port_number(c, "http") == WORKER_PORT
        startup = c["startupProbe"]
        assert startup["httpGet"]["path"] == "/health" and port_number(c, startup["httpGet"]["port"]) == WORKER_PORT
        assert c["readinessProbe"]["httpGet"]["path"] == "/health"
        annotations = worker["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(WORKER_PORT)
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        gpus = c["resources"].get("limits", {}).get("nvidia.com/gpu")
        if target == "overlays/demo":
            assert gpus is None and "/models/huggingface" not in mounts
            assert c["image"].startswith("higgs-gateway")
            assert c["command"][:3] == ["higgs-gateway", "emulate", DEFAULT_MODEL]
            assert c["command"][c["command"].index("--deploy-config") + 1] == "/profiles/$(HIGGS_PROFILE)"
            assert c["command"][c["command"].index("--port") + 1] == str(WORKER_PORT)
            assert startup["periodSeconds"] * startup["failureThreshold"] >= 30
        else:
            assert gpus == 1
            assert "/models/huggingface" in mounts and "/dev/shm" in mounts
            assert "command" not in c  # the image's entrypoint: the real serve command
            assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # minutes
    if target == "overlays/demo":
        assert not find(docs, "PersistentVolumeClaim", "higgs-hf-cache")
        assert not any("nvidia.com/gpu" in json.dumps(d) for d in docs)


def test_k8s_demo_emulator_flags_parse() -> None:
    cli = pytest.importorskip("gateway.emulator.cli", reason="the emulator CLI is not written yet")
    if not hasattr(cli, "build_parser"):
        pytest.skip("gateway.emulator.cli has no build_parser()")
    worker = next(
        d for d in find(kustomize(str(K8S / "overlays/demo")), "Deployment") if "worker" in d["metadata"]["name"]
    )
    command = [a.replace("$(HIGGS_PROFILE)", POOL_PROFILE[PoolName.LOW_LATENCY]) for a in container(worker)["command"]]
    args = cli.build_parser().parse_args(command[2:])
    assert args.omni and args.enable_server_load_tracking and args.port == WORKER_PORT
    load_deploy_profile(PROFILES / Path(args.deploy_config).name)


def test_k8s_prometheus_operator_component(tmp_path: Path) -> None:
    overlay = tmp_path / "with-monitors"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({
            "resources": [os.path.relpath(K8S / "overlays" / "demo", overlay)],
            "components": [os.path.relpath(K8S / "components" / "prometheus-operator", overlay)],
        })
    )  # fmt: skip
    docs = kustomize(str(overlay))
    monitors = {d["metadata"]["name"]: d for d in find(docs, "ServiceMonitor")}
    assert set(monitors) == {"higgs-gateway", "higgs-worker"}
    for monitor in monitors.values():
        assert monitor["metadata"]["namespace"] == one(docs, "Service", "higgs-gateway")["metadata"]["namespace"]
        services = [
            s
            for s in find(docs, "Service")
            if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        assert services and all(
            s["spec"]["ports"][0]["name"] == monitor["spec"]["endpoints"][0]["port"] for s in services
        )


# ---- Policy: what every rendered object must satisfy ----------------------------------

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")


def workloads(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in WORKLOAD_KINDS]


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"]["labels"])


def effective(pod: dict[str, Any], c: dict[str, Any], key: str) -> Any:
    """A securityContext field as it applies: the container's, else the pod's."""
    return c.get("securityContext", {}).get(key, pod.get("securityContext", {}).get(key))


def image_is_versioned(image: str) -> bool:
    """An explicit tag other than `latest`, or a digest (a registry's :port is no tag)."""
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.split(":", 1)[1] not in ("", "latest")


def option(args: list[str], name: str) -> str:
    return str(args[args.index(name) + 1])


def redis_bytes(value: str) -> int:
    """Redis's memory units: k/m/g are powers of 1000, kb/mb/gb powers of 1024."""
    number, unit = re.fullmatch(r"(\d+)([a-z]*)", value.lower()).groups()  # type: ignore[union-attr]
    return int(number) * {"": 1, "b": 1, "k": 10**3, "kb": 2**10, "m": 10**6, "mb": 2**20, "g": 10**9, "gb": 2**30}[unit]


def quantity_bytes(value: str | int) -> int:
    """A Kubernetes quantity (Mi, Gi; M, G) or a compose size (m, g: powers of 1024)."""
    number, unit = re.fullmatch(r"(\d+)([A-Za-z]*)", str(value)).groups()  # type: ignore[union-attr]
    units = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9, "m": 2**20, "g": 2**30}
    return int(number) * units[unit]


@pytest.mark.parametrize("target", OVERLAYS)
def test_k8s_every_container_is_hardened(target: str) -> None:
    docs = kustomize(str(K8S / target))
    assert len(workloads(docs)) >= 3
    worker_home = env_of(dockerfile("worker.Dockerfile"))["HOME"]
    for workload in workloads(docs):
        pod = workload["spec"]["template"]["spec"]
        assert not any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"))
        for c in pod["containers"] + pod.get("initContainers", []):
            where = f"{target}: {workload['metadata']['name']}/{c['name']}"
            context = c.get("securityContext", {})
            assert effective(pod, c, "runAsNonRoot") is True, where
            assert effective(pod, c, "runAsUser") not in (None, 0), where  # numeric: verifiable
            assert effective(pod, c, "seccompProfile") == {"type": "RuntimeDefault"}, where
            assert context.get("allowPrivilegeEscalation") is False, where
            assert context.get("privileged", False) is False, where
            assert context.get("readOnlyRootFilesystem") is True, where
            assert context.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not context.get("capabilities", {}).get("add"), where
            resources = c.get("resources", {})
            assert {"cpu", "memory"} <= resources.get("requests", {}).keys(), where
            assert "memory" in resources.get("limits", {}), where
            assert "readinessProbe" in c and "livenessProbe" in c, where
            assert image_is_versioned(c["image"]), f"{where}: {c['image']}"
        # A read-only root: what the real worker writes at run time is on volumes.
        if pod_labels(workload).get("app.kubernetes.io/component") == "worker" and target != "overlays/demo":
            mounts = {m["mountPath"] for m in container(workload)["volumeMounts"]}
            assert {worker_home, "/tmp", "/dev/shm", "/models/huggingface"} <= mounts
        # Only the gateways talk to the Kubernetes API (discovery).
        if pod_labels(workload)["app.kubernetes.io/name"] != "higgs-gateway":
            assert pod.get("automountServiceAccountToken") is False, workload["metadata"]["name"]


@pytest.mark.parametrize("target", OVERLAYS)
def test_k8s_disruption_budgets(target: str) -> None:
    docs = kustomize(str(K8S / target))
    budgets = find(docs, "PodDisruptionBudget")
    deployments = find(docs, "Deployment")
    for deployment in deployments:
        replicas = deployment["spec"].get("replicas", 1)
        covering = [b for b in budgets if selects(b["spec"]["selector"]["matchLabels"], pod_labels(deployment))]
        is_worker = pod_labels(deployment).get("app.kubernetes.io/component") == "worker"
        if replicas > 1 or is_worker:
            assert len(covering) == 1, deployment["metadata"]["name"]
        for budget in covering:
            # Never one that blocks node drains for good.
            if "maxUnavailable" in budget["spec"]:
                assert budget["spec"]["maxUnavailable"] >= 1
            else:
                assert budget["spec"]["minAvailable"] < replicas
    for budget in budgets:  # each one covers the pods of exactly one Deployment
        covered = [d for d in deployments if selects(budget["spec"]["selector"]["matchLabels"], pod_labels(d))]
        assert len(covered) == 1, budget["metadata"]["name"]


@pytest.mark.parametrize("target", OVERLAYS)
def test_k8s_images_are_versioned(target: str) -> None:
    docs = kustomize(str(K8S / target))
    images = {c["image"] for w in workloads(docs) for c in w["spec"]["template"]["spec"]["containers"]}
    assert images and all(image_is_versioned(image) for image in images), images
    gateway_image = container(one(docs, "Deployment", "higgs-gateway"))["image"]
    assert gateway_image.endswith(":" + pyproject()["project"]["version"])


def test_base_kustomization_tags_the_package_version() -> None:
    kustomization = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    tags = {image["name"]: image.get("newTag") for image in kustomization["images"]}
    assert tags["higgs-gateway"] == pyproject()["project"]["version"]
    assert tags["higgs-worker"] == re.search(r"vllm-omni==([\w.]+)", " ".join(pyproject()["project"]["optional-dependencies"]["worker"]))[1]  # type: ignore[index]


@pytest.mark.parametrize("name", [*COMPOSE_FILES, "compose.replicas.yaml"])
def test_compose_images_are_versioned(name: str) -> None:
    services = compose(name)["services"]
    images = {s["image"] for s in services.values() if "image" in s}
    assert all(image_is_versioned(image) for image in images), images
    if "gateway" in services and "image" in services["gateway"]:
        # The demo's build (with the emulator's speech) has its own name: never the serving image's tag.
        repository = "higgs-gateway-demo" if name == "compose.demo.yaml" else "higgs-gateway"
        assert services["gateway"]["image"] == f"{repository}:{pyproject()['project']['version']}"


@pytest.mark.parametrize("target", ["base", "overlays/gpu"])
def test_k8s_redis_is_bounded_and_authenticated(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = kustomize(str(K8S / target))
    redis = container(one(docs, "Deployment", "higgs-redis"))
    args, env = [str(a) for a in redis["args"]], {e["name"]: e for e in redis["env"]}
    # Refuses writes before the kernel kills it: the ceiling leaves room for the
    # append-only rewrite's fork, client buffers and fragmentation.
    assert redis_bytes(option(args, "--maxmemory")) <= 0.8 * quantity_bytes(redis["resources"]["limits"]["memory"])
    # Never a policy that may evict a voice, a drain or an override (they carry no TTL).
    assert option(args, "--maxmemory-policy") == "noeviction" or option(args, "--maxmemory-policy").startswith("volatile-")
    # The password from a Secret, never a literal; redis-cli (the probe) uses the same.
    assert option(args, "--requirepass") == "$(REDIS_PASSWORD)"
    secret = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secret.get("optional", False) is False
    assert env["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"] == secret
    assert redis["readinessProbe"]["exec"]["command"] == ["redis-cli", "ping"]

    # The gateways read the same Secret, mounted as the file their config names.
    gateway = one(docs, "Deployment", "higgs-gateway")
    gateway_env = {e["name"]: e for e in container(gateway)["env"]}
    password_file = Path(gateway_env["HIGGS_GATEWAY_STATE__REDIS_PASSWORD_FILE"]["value"])
    mount = next(m for m in container(gateway)["volumeMounts"] if m["mountPath"] == str(password_file.parent))
    volume = next(v for v in gateway["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert mount.get("readOnly") is True
    assert volume["secret"]["secretName"] == secret["name"] and not volume["secret"].get("optional", False)
    assert {"key": secret["key"], "path": password_file.name} in volume["secret"]["items"]
    # ...and the config accepts it: the client is built with the file's password.
    from gateway.state.redis_backend import connect

    mounted = tmp_path / password_file.name
    mounted.write_text("from-the-secret\n")
    monkeypatch.setenv("HIGGS_GATEWAY_STATE__REDIS_PASSWORD_FILE", str(mounted))
    config_map = one(docs, "ConfigMap", volume_configmap(gateway, "/etc/higgs-gateway") or "")
    state = load_config(None, yaml.safe_load(config_map["data"][Path(CONFIG_PATH).name])).state
    assert connect(state, timeout_s=1.0).connection_pool.connection_kwargs["password"] == "from-the-secret"


def policy_peers(policy: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(peers in the policy's namespace, peers in other namespaces) of its ingress rules."""
    peers = [peer for rule in policy["spec"].get("ingress", []) for peer in rule.get("from", [])]
    return [p for p in peers if "namespaceSelector" not in p], [p for p in peers if "namespaceSelector" in p]


@pytest.mark.parametrize("target", OVERLAYS)
def test_k8s_network_policies_select_the_right_pods(target: str) -> None:
    docs = kustomize(str(K8S / target))
    policies = {p["metadata"]["name"]: p for p in find(docs, "NetworkPolicy")}

    def selected(selector: dict[str, Any]) -> set[str]:
        return {w["metadata"]["name"] for w in workloads(docs) if selects(selector.get("matchLabels", {}), pod_labels(w))}

    for policy in policies.values():
        assert selected(policy["spec"]["podSelector"]), f"{policy['metadata']['name']} selects no pod"
        for peer in policy_peers(policy)[0]:
            assert peer["podSelector"].get("matchLabels"), "an empty selector would admit every pod"

    workers = {w["metadata"]["name"] for w in workloads(docs) if pod_labels(w).get("app.kubernetes.io/component") == "worker"}
    worker_policy = policies["higgs-worker"]
    assert selected(worker_policy["spec"]["podSelector"]) == workers
    local, elsewhere = policy_peers(worker_policy)
    assert set().union(*(selected(p["podSelector"]) for p in local)) == {"higgs-gateway"}
    assert [p["podSelector"] for p in elsewhere] == [{"matchLabels": {"app.kubernetes.io/name": "prometheus"}}]
    assert [p["namespaceSelector"] for p in elsewhere] == [{"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}]
    assert {port["port"] for rule in worker_policy["spec"]["ingress"] for port in rule["ports"]} == {WORKER_PORT}

    if target == "overlays/demo":
        assert "higgs-redis" not in policies  # no Redis there
        return
    redis_policy = policies["higgs-redis"]
    assert selected(redis_policy["spec"]["podSelector"]) == {"higgs-redis"}
    local, elsewhere = policy_peers(redis_policy)
    assert not elsewhere and set().union(*(selected(p["podSelector"]) for p in local)) == {"higgs-gateway"}
    redis_port = port_number(container(one(docs, "Deployment", "higgs-redis")), "redis")
    assert [port["port"] for rule in redis_policy["spec"]["ingress"] for port in rule["ports"]] == [redis_port]
    # Redis opens no connection of its own.
    assert "Egress" in redis_policy["spec"]["policyTypes"] and not redis_policy["spec"].get("egress")


# ---- Autoscaling: KEDA ScaledObjects, or HPAs on prometheus-adapter ---------------------

DESIRED_WORKERS = "higgs_gateway_desired_workers"
PLANNER_JUDGED = "higgs_gateway_planner_judged"


def worker_deployments(docs: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d
        for d in find(docs, "Deployment")
        if pod_labels(d).get("app.kubernetes.io/component") == "worker"
    }


def startup_budget_s(deployment: dict[str, Any]) -> int:
    """The longest a worker of this Deployment may take to start before it is restarted."""
    probe = container(deployment)["startupProbe"]
    return int(probe["periodSeconds"]) * int(probe["failureThreshold"])


def assert_scales_each_worker_once(
    docs: tuple[dict[str, Any], ...], scalers: list[dict[str, Any]]
) -> dict[PoolName, tuple[dict[str, Any], dict[str, Any]]]:
    """Every scaler targets a worker Deployment that exists in the same namespace, each
    worker Deployment has exactly one, and the pool labels agree. -> pool: (scaler, target)."""
    workers = worker_deployments(docs)
    assert len(workers) == 2
    ref_names = [s["spec"]["scaleTargetRef"]["name"] for s in scalers]
    assert sorted(ref_names) == sorted(workers), ref_names
    by_pool = {}
    for scaler in scalers:
        ref = scaler["spec"]["scaleTargetRef"]
        assert ref.get("apiVersion", "apps/v1") == "apps/v1" and ref.get("kind", "Deployment") == "Deployment"
        target = workers[ref["name"]]
        assert scaler["metadata"]["namespace"] == target["metadata"]["namespace"]  # a ref never crosses namespaces
        pool = PoolName(pod_labels(target)["higgs-gateway/pool"])
        assert scaler["metadata"]["labels"]["higgs-gateway/pool"] == pool.value
        # The autoscaler owns the count: the manifests no longer set it.
        assert "replicas" not in target["spec"]
        by_pool[pool] = (scaler, target)
    assert set(by_pool) == set(PoolName)
    return by_pool


# ScaledObject fields (keda.sh/v1alpha1, KEDA 2.x): a misspelt one would be dropped by the
# API server without a word, leaving that setting at KEDA's default.
SCALED_OBJECT_SPEC = {
    "scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "idleReplicaCount",
    "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers",
}  # fmt: skip
SCALED_OBJECT_ADVANCED = {"horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount", "scalingModifiers"}
SCALED_OBJECT_TRIGGER = {"type", "name", "metadata", "metricType", "authenticationRef", "useCachedMetrics"}


def round_trips(model: Any, data: dict[str, Any]) -> bool:
    """The Kubernetes API type accepts the data as written: required fields present and
    nothing unknown or misspelt (lightkube drops what it does not know)."""
    return bool(model.from_dict(data).to_dict() == data)


def assert_gpu_friendly_behavior(behavior: dict[str, Any], target: dict[str, Any]) -> None:
    """Scale-down waits out a worker's start-up and gives GPUs back one at a time."""
    from lightkube.models.autoscaling_v2 import HorizontalPodAutoscalerBehavior

    assert round_trips(HorizontalPodAutoscalerBehavior, behavior), behavior  # KEDA passes it to its HPA as is
    down, up = behavior["scaleDown"], behavior["scaleUp"]
    assert down["stabilizationWindowSeconds"] >= startup_budget_s(target) >= 600
    assert all(p["type"] == "Pods" and p["value"] == 1 for p in down["policies"])
    assert up["stabilizationWindowSeconds"] <= 120  # a missing worker hurts now
    assert all(p["periodSeconds"] > 0 and p["value"] >= 1 for p in down["policies"] + up["policies"])


def assert_desired_workers_query(query: str, pool_matcher: str) -> None:
    """max over the gateway replicas (they export the same fleet-wide count), only those
    whose planner judged; never a sum."""
    compact = " ".join(query.split())
    assert re.match(r"max(\s+by\s*\(pool\))?\s*\(", compact), compact
    assert "sum" not in compact and f"{DESIRED_WORKERS}{{{pool_matcher}}}" in compact
    assert f"and on (instance) ({PLANNER_JUDGED} == 1)" in compact


def test_k8s_keda_overlay_scales_both_worker_pools() -> None:
    docs = kustomize(str(K8S / "overlays/gpu-keda"))
    scaled = find(docs, "ScaledObject")
    assert len(scaled) == 2
    for pool, (obj, target) in assert_scales_each_worker_once(docs, scaled).items():
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        spec = obj["spec"]
        assert {"scaleTargetRef", "triggers"} <= spec.keys() <= SCALED_OBJECT_SPEC
        assert spec["advanced"].keys() <= SCALED_OBJECT_ADVANCED and spec["advanced"]["horizontalPodAutoscalerConfig"].keys() <= {"name", "behavior"}
        # Never to zero unless the operator asks; a maximum that bounds the GPUs taken.
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        assert spec["cooldownPeriod"] >= startup_budget_s(target) and 0 < spec["pollingInterval"] <= 60
        assert "fallback" not in spec  # a fixed count on a Prometheus outage would change the fleet
        assert_gpu_friendly_behavior(spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"], target)
        (trigger,) = spec["triggers"]
        assert trigger.keys() <= SCALED_OBJECT_TRIGGER
        assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
        metadata = trigger["metadata"]
        assert all(isinstance(v, str) for v in metadata.values()), metadata  # KEDA reads strings only
        assert {"serverAddress", "query", "threshold"} <= metadata.keys()
        assert re.fullmatch(r"https?://[\w.-]+(:\d+)?", metadata["serverAddress"])
        # replicas = ceil(desired / 1): the planner's count itself.
        assert float(metadata["threshold"]) == 1.0
        # No replica judged -> empty result -> an error, so the count is held, not zeroed.
        assert metadata["ignoreNullValues"] == "false"
        assert_desired_workers_query(metadata["query"], f'pool="{pool.value}"')
    # Nothing else changed: the rest is the GPU overlay's.
    assert not find(docs, "HorizontalPodAutoscaler")
    plain = kustomize(str(K8S / "overlays/gpu"))
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} - {(d["kind"], d["metadata"]["name"]) for d in plain} == {
        ("ScaledObject", "higgs-worker-low-latency"),
        ("ScaledObject", "higgs-worker-high-throughput"),
    }


def adapter_rule(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    config = yaml.safe_load(one(docs, "ConfigMap", "higgs-prometheus-adapter-rules")["data"]["config.yaml"])
    assert set(config) == {"externalRules"}  # adds nothing to the adapter's other APIs
    (rule,) = config["externalRules"]
    return rule


def test_k8s_hpa_overlay_scales_both_worker_pools_through_prometheus_adapter() -> None:
    docs = kustomize(str(K8S / "overlays/gpu-hpa"))
    hpas = find(docs, "HorizontalPodAutoscaler")
    assert len(hpas) == 2 and not find(docs, "ScaledObject")
    rule = adapter_rule(docs)
    assert rule["name"]["as"] == DESIRED_WORKERS and re.fullmatch(rule["name"]["matches"], DESIRED_WORKERS)
    assert DESIRED_WORKERS in rule["seriesQuery"] and 'pool!=""' in rule["seriesQuery"]
    # Gateway series scraped through pod annotations carry no namespace label.
    assert rule["resources"] == {"namespaced": False}
    # The adapter puts the series name and the HPA's selector (pool="...") into the template.
    assert rule["metricsQuery"].count("<<.Series>>{<<.LabelMatchers>>}") == 1
    assert_desired_workers_query(rule["metricsQuery"].replace("<<.Series>>", DESIRED_WORKERS), "<<.LabelMatchers>>")
    keda = {s["spec"]["scaleTargetRef"]["name"]: s["spec"] for s in find(kustomize(str(K8S / "overlays/gpu-keda")), "ScaledObject")}
    for pool, (hpa, target) in assert_scales_each_worker_once(docs, hpas).items():
        from lightkube.resources.autoscaling_v2 import HorizontalPodAutoscaler

        assert hpa["apiVersion"] == "autoscaling/v2" and round_trips(HorizontalPodAutoscaler, hpa), hpa
        spec = hpa["spec"]
        (metric,) = spec["metrics"]
        assert metric["type"] == "External"
        assert metric["external"]["metric"] == {"name": DESIRED_WORKERS, "selector": {"matchLabels": {"pool": pool.value}}}
        assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
        assert_gpu_friendly_behavior(spec["behavior"], target)
        # The same bounds and pace as the KEDA alternative.
        same = keda[target["metadata"]["name"]]
        assert (spec["minReplicas"], spec["maxReplicas"]) == (same["minReplicaCount"], same["maxReplicaCount"])
        assert spec["behavior"] == same["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert spec["minReplicas"] >= 1


@pytest.mark.parametrize("namespace", [None, "speech"])
@pytest.mark.parametrize(("component", "kind"), [("keda-autoscaling", "ScaledObject"), ("hpa-autoscaling", "HorizontalPodAutoscaler")])
def test_k8s_autoscaling_components_fit_any_overlay(component: str, kind: str, namespace: str | None, tmp_path: Path) -> None:
    # Added to another overlay (here the demo's emulated workers), renamed or not, the
    # autoscalers land beside the Deployments they scale.
    overlay = tmp_path / "autoscaled"
    overlay.mkdir()
    kustomization: dict[str, Any] = {
        "resources": [os.path.relpath(K8S / "overlays" / "demo", overlay)],
        "components": [os.path.relpath(K8S / "components" / component, overlay)],
    }
    if namespace:
        kustomization["namespace"] = namespace
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    docs = kustomize(str(overlay))
    assert_scales_each_worker_once(docs, find(docs, kind))
    assert {d["metadata"]["namespace"] for d in find(docs, "Deployment")} == {namespace or "higgs"}
