"""Images, compose files and Kubernetes manifests agree with the code they deploy.

Structural checks only (no container engine): every file parses; ports, probe paths,
commands, profiles and mounts match what the gateway and the workers really use. When
`docker compose`/`docker-compose`, `kubectl` or `promtool` are installed, their own
validators run too; otherwise those parts skip with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import DEFAULT_MODEL, VLLM_OMNI_COMMAND, ServerConfig, load_config
from gateway.deploy_profile import load_deploy_profile
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


def test_gateway_image() -> None:
    ins = dockerfile("gateway.Dockerfile")
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", final_base(ins))
    assert json_form(args_of(ins, "CMD")[-1]) == ["higgs-gateway", "serve", "--config", CONFIG_PATH]
    user = args_of(ins, "USER")[-1].split(":")[0]
    assert user not in ("root", "0")
    assert DATA_DIR in json_form(args_of(ins, "VOLUME")[-1])
    assert str(GATEWAY_PORT) in args_of(ins, "EXPOSE")
    health = json_form(args_of(ins, "HEALTHCHECK")[-1])
    assert health[:2] == ["python", "-c"] and f"http://127.0.0.1:{GATEWAY_PORT}/health" in health[2]
    # The in-cluster discovery client and the tracing SDK come with the image.
    extras = pyproject()["project"]["optional-dependencies"]
    installed = {
        extra for run in args_of(ins, "RUN") for found in re.findall(r"\.whl\)\[([\w,]+)\]", run) for extra in found.split(",")
    }
    assert {"kubernetes", "tracing"} <= installed <= extras.keys()


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
    assert final_base(ins).startswith("nvidia/cuda:")
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
    """Compose's ${VAR:-default} interpolation with nothing set in the environment."""
    if isinstance(value, str):
        return re.sub(r"\$\{\w+(?::?-([^}]*))?\}", lambda m: m.group(1) or "", value)
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
    assert f"{GATEWAY_PORT}:{GATEWAY_PORT}" in gateway["ports"]
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
    assert "9090:9090" in services["prometheus"]["ports"]


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
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
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
    cli = compose_cli()
    if cli is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    env_vars = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "GATEWAY_PORTS": "8000-8002"}
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
    assert "16686:16686" in jaeger["ports"]
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
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
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


OVERLAYS = ["base", "overlays/gpu", "overlays/demo"]


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
