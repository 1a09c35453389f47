"""Workers the gateway runs itself: deploy-profile checks, launch, restart, warm-up.

Modules: ``profile_check`` (rules + ``profiles check`` CLI), ``setup`` (config -> supervisors),
``pool`` (PoolSupervisor), ``worker`` (one worker's life), ``process`` (process groups),
``command`` (argv/env/port), ``restart`` (backoff, crash loop), ``logfile`` (rotated logs),
``readiness`` (start timeout), ``warmup`` (bursts before a worker is routable).
"""
