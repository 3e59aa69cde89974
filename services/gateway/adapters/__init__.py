"""Adapters of the gateway's ports over the other services: engine agents with load-aware,
prefix-affine routing (``engines``, ``router``) and the csl with its confirmed-name mirror
(``library``, ``name_mirror``). The admission client lives with its service
(``services.admission.client``).

May import: ``services.common``, other services' ``client`` modules and generated stubs, the
gateway's ``ports`` and ``values``. Only ``server`` (the wiring) imports these modules.
"""
