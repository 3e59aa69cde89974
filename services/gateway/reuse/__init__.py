"""The gateway's half of exact reuse (C1, dynbranch §3.2): one home for what a demand is called
and when a stored result may answer it.

- ``naming``: the reuse name of a demand or a fill step (tenant, fingerprint, rendered input);
  only deterministic stages are named (DESIGN.md §5.1).
- ``freshness``: whether a stored result's reads are still current, asked of the builtin tools
  that own the records.
- ``single_flight``: canonical executions running now, so that an identical demand (or a fill
  step under the same name) joins one instead of running it again.
- ``library_path``: the canonical path's side of the library: probe (awaiting a store still in
  flight), the freshness check of a hit, and owned background stores.

May import: ``services.common``, the gateway's ``values``, ``ports``, ``templates``, ``tools`` and
``execution`` (a ``StageRun`` is what a join takes and a store keeps); never ``speculation``,
``stages`` or anything above them.
"""
