"""A fleet simulator: emulated engines on a virtual clock behind the real admission and policy.

``higgs-gateway simulate`` replays the benchmark's sweeps and traces in seconds instead of
minutes, with the same report format; see ``docs/routing.md``.
"""
