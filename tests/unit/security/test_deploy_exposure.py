"""Security, what the shipped deployments expose: every gateway config says whether it
needs keys (none serves anonymously by default beyond loopback), monitoring answers on
loopback with a password an operator chose, and the workers' unauthenticated API takes
traffic only from the gateways and the monitoring namespace's Prometheus, and reaches out
only to DNS and public HTTP(S), never to link-local (cloud metadata) or private ranges."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import pytest
import yaml

from gateway.config import load_config
from gateway.security.exposure import refuse_anonymous_exposure
from tests.unit.test_deploy_manifests import (
    DOCKER, K8S, OVERLAYS, container, find, kustomize, one, volume_configmap,
)  # fmt: skip

SHIPPED_CONFIGS = [
    "config/gateway.image.yaml", "config/gateway.compose.yaml", "k8s/base/config/gateway.yaml",
    "../profiles/gateway.two-gpu.yaml",
]  # fmt: skip
FORBIDDEN_DESTINATIONS = ["169.254.169.254/32", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.1/32"]


def raw_compose(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((DOCKER / name).read_text()))


@pytest.mark.parametrize("name", SHIPPED_CONFIGS)
def test_every_shipped_config_says_whether_it_needs_keys(name: str) -> None:
    document = yaml.safe_load((DOCKER / name).read_text())
    auth = document.get("auth", {})
    assert "allow_anonymous" in auth or auth.get("api_key_sha256") or auth.get("keys"), name
    # On 0.0.0.0 with no key given, each refuses to start: keys come from the deployment.
    assert refuse_anonymous_exposure(load_config(DOCKER / name)) is not None


@pytest.mark.parametrize("target", OVERLAYS)
def test_kubernetes_gateways_need_keys_except_in_the_demo(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = kustomize(str(K8S / target))
    deployment = one(docs, "Deployment", "higgs-gateway")
    env = {e["name"]: e for e in container(deployment)["env"]}
    keys = env["HIGGS_GATEWAY_AUTH__API_KEY_SHA256"]["valueFrom"]["secretKeyRef"]
    assert (keys["name"], keys["key"]) == ("higgs-gateway-api-keys", "sha256")
    # The config the pod runs: the mounted file under the container's literal variables.
    configmap = volume_configmap(deployment, "/etc/higgs-gateway")
    (rendered,) = [d for d in find(docs, "ConfigMap") if d["metadata"]["name"] == configmap]
    for name, entry in env.items():
        if "value" in entry and name.startswith("HIGGS_GATEWAY_") and "PASSWORD_FILE" not in name:
            monkeypatch.setenv(name, re.sub(r"\$\(\w+\)", "higgs", str(entry["value"])))
    document = yaml.safe_load(rendered["data"]["gateway.yaml"])
    config = load_config(overrides=document)
    refused = refuse_anonymous_exposure(config)
    if target == "overlays/demo":
        assert refused is None and config.auth.allow_anonymous
    else:
        assert refused is not None and "auth.allow_anonymous" in refused


@pytest.mark.parametrize("name", ["compose.yaml", "compose.demo.yaml", "compose.tracing.yaml"])
def test_compose_publishes_monitoring_on_loopback_only(name: str) -> None:
    services = raw_compose(name)["services"]
    for service in ("prometheus", "grafana", "jaeger"):
        for port in services.get(service, {}).get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {service} published on every interface: {port}"


@pytest.mark.parametrize("name", ["compose.yaml", "compose.demo.yaml"])
def test_grafana_has_no_default_password(name: str) -> None:
    password = raw_compose(name)["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", password), password  # required, no admin/admin


def test_compose_gateways_need_keys_or_stay_on_loopback() -> None:
    gpu = raw_compose("compose.yaml")["services"]["gateway"]
    assert gpu["environment"]["HIGGS_GATEWAY_AUTH__API_KEY_SHA256"].startswith("${HIGGS_API_KEY_SHA256:?")
    demo = raw_compose("compose.demo.yaml")["services"]["gateway"]
    assert "--allow-anonymous" in demo["command"]  # said explicitly...
    assert all(str(port).startswith("127.0.0.1:") for port in demo["ports"])  # ...and kept to this machine


def worker_policy(target: str) -> dict[str, Any]:
    return one(kustomize(str(K8S / target)), "NetworkPolicy", "higgs-worker")


@pytest.mark.parametrize("target", OVERLAYS)
def test_only_the_monitoring_namespaces_prometheus_reaches_workers(target: str) -> None:
    peers = [peer for rule in worker_policy(target)["spec"]["ingress"] for peer in rule["from"]]
    elsewhere = [peer for peer in peers if "namespaceSelector" in peer]
    # One peer: that namespace AND that label (two peers would admit either).
    assert elsewhere == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }]  # fmt: skip
    assert all(peer.get("namespaceSelector") != {} for peer in peers)


def allowed(policy: dict[str, Any], address: str, port: int) -> bool:
    """Does an egress rule admit TCP to ``address:port`` by IP block?"""
    ip = ipaddress.ip_address(address)
    for rule in policy["spec"]["egress"]:
        if not any(p["port"] == port for p in rule.get("ports", [])):
            continue
        for peer in rule.get("to", []):
            block = peer.get("ipBlock")
            if block is None or ip.version != ipaddress.ip_network(block["cidr"]).version:
                continue
            inside = ip in ipaddress.ip_network(block["cidr"])
            excepted = any(ip in ipaddress.ip_network(e) for e in block.get("except", []) if ipaddress.ip_network(e).version == ip.version)
            if inside and not excepted:
                return True
    return False


@pytest.mark.parametrize("target", OVERLAYS)
def test_workers_egress_is_dns_and_public_http_only(target: str) -> None:
    policy = worker_policy(target)
    assert "Egress" in policy["spec"]["policyTypes"]
    dns = [rule for rule in policy["spec"]["egress"] if {p["port"] for p in rule["ports"]} == {53}]
    assert dns and all("ipBlock" not in peer for rule in dns for peer in rule["to"])
    for destination in FORBIDDEN_DESTINATIONS:
        address = str(ipaddress.ip_network(destination)[1 if ipaddress.ip_network(destination).num_addresses > 1 else 0])
        for port in (80, 443):
            assert not allowed(policy, address, port), f"{target}: egress to {address}:{port}"
    assert not allowed(policy, "169.254.169.254", 80)  # the cloud metadata service
    assert not allowed(policy, "fe80::1", 443) and not allowed(policy, "fd00::1", 443)
    assert allowed(policy, "18.160.0.1", 443)  # a public host (the Hub, an allowed media host)
