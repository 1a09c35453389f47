"""From the gateway config to running supervisors, refusing profiles that break the rules."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from gateway.config import GatewayConfig
from gateway.worker.profile import DeployProfile, ProfileError, load_deploy_profile, resolve_profile_path
from gateway.pools.sink import WorkerSink
from gateway.supervisor.pool import PoolSupervisor
from gateway.supervisor.profile_check import Finding, Severity, check_profile, has_errors
from gateway.supervisor.readiness import IsReady
from gateway.types import PoolName

log = logging.getLogger("higgs_gateway.supervisor")


class ProfileCheckFailed(RuntimeError):
    """A supervised pool's deploy profile has errors; the gateway must not start on it."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        errors = [str(f) for f in findings if f.severity is Severity.ERROR]
        super().__init__("deploy profile check failed:\n  " + "\n  ".join(errors))


def check_supervised_profiles(
    config: GatewayConfig, profiles: Mapping[PoolName, DeployProfile] | None = None
) -> list[Finding]:
    """Findings for every pool that has ``launch:``, as its workers will run it (with
    ``launch.stage_overrides`` applied), including the pool-role rule. ``profiles``: the
    ones the gateway already read at start-up (else each is read here)."""
    findings: list[Finding] = []
    for name, pool in config.pools.items():
        if pool.launch is None:
            continue
        try:
            profile = profiles[name] if profiles is not None else load_deploy_profile(pool.profile, pool.launch.stage_overrides)
        except ProfileError as exc:
            findings.append(Finding(exc.source, exc.key, exc.reason))
            continue
        except OSError as exc:
            findings.append(Finding(pool.profile, "<file>", str(exc)))
            continue
        findings.extend(check_profile(profile, name))
    return findings


def build_supervisors(
    config: GatewayConfig,
    sink: WorkerSink,
    profiles: Mapping[PoolName, DeployProfile] | None = None,
    is_ready: IsReady | None = None,
) -> list[PoolSupervisor]:
    """One PoolSupervisor per pool with ``launch:``; raises ProfileCheckFailed on any error
    (warnings, e.g. streaming off, are logged). Nothing is started yet: call ``start()``."""
    findings = check_supervised_profiles(config, profiles)
    if has_errors(findings):
        raise ProfileCheckFailed(findings)
    for finding in findings:
        log.warning("deploy profile: %s", finding)
    supervisors = []
    for name, pool in config.pools.items():
        if pool.launch is None:
            continue
        supervisors.append(
            PoolSupervisor(
                pool=name,
                launch=pool.launch,
                # Absolute: workers may run with another working directory than ours.
                profile_path=resolve_profile_path(pool.profile).resolve(),
                sink=sink,
                data_dir=Path(config.data_dir),
                served_model_name=config.models.served_model_name,
                is_ready=is_ready,
            )
        )
    return supervisors
