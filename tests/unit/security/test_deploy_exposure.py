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
# IANA's IPv4 and IPv6 special-purpose address registries, every block not globally
# reachable, and multicast: no worker has business there (the cloud metadata service sits
# in 169.254/16, the node's own services on 0.0.0.0 and loopback, the cluster in private).
FORBIDDEN_DESTINATIONS = [
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
    "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
    "::/128", "::1/128", "64:ff9b:1::/48", "100::/64", "2001:db8::/32", "fc00::/7", "fe80::/10",
    "ff00::/8",
]  # fmt: skip
# Private IPv4 behind NAT64's well-known prefix (64:ff9b::/96 + the IPv4 address).
NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")


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
        network = ipaddress.ip_network(destination)
        for address in {network[0], network[network.num_addresses // 2], network[-1]}:
            for port in (80, 443):
                assert not allowed(policy, str(address), port), f"{target}: egress to {address}:{port}"
    for private in ("10.1.2.3", "100.64.0.1", "127.0.0.1", "169.254.169.254", "172.16.0.1", "192.168.1.1"):
        embedded = ipaddress.ip_address(int(NAT64_WELL_KNOWN.network_address) + int(ipaddress.ip_address(private)))
        assert not allowed(policy, str(embedded), 443), f"{target}: egress to {private} through NAT64 ({embedded})"
    assert allowed(policy, "64:ff9b::1240:1", 443)  # a public IPv4 host through NAT64
    assert not allowed(policy, "169.254.169.254", 80)  # the cloud metadata service
    assert not allowed(policy, "fe80::1", 443) and not allowed(policy, "fd00::1", 443)
    assert allowed(policy, "18.160.0.1", 443)  # a public host (the Hub, an allowed media host)
