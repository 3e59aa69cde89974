"""Early fill (C2, dynbranch §3.3): branch lifecycle (``branches``), settling a branch across
gateway replicas (``replicas``), running one fill (``fills``), branch and fill state (``state``)
and the candidate predictors (``predictors``, ``titles``).

May import: ``services.common``, the gateway's ``reuse`` (naming a fill step exactly as its
demand, freshness, single-flight), ``execution`` (what fills run through), ``pace``, ``ports``,
``values``, ``templates`` and ``tools``. Never ``stages``, ``core`` or an edge: the canonical
path calls down into speculation, not the other way round.
"""
