"""The experiment arms and what a paired run of them measures (DESIGN.md §6).

- ``specs``: the arms (``ARM_SPECS``) and the order they run in;
- ``runner``: one schedule under each arm on a fresh mesh (``run_arm``, ``run_arms``);
- ``recording``, ``equivalence``, ``divergence``, ``oracle``: what a run records, value
  equivalence against the floor (and on a real engine), the oracle bound;
- ``summary``, ``stats``, ``envelope``: per-arm figures, paired statistics, regret against the
  fixed fan-outs' lower envelope;
- ``load_levels``: the calibrated load levels; ``leak_guard``: the predictors' leak check;
- ``lads_replay``: one LADS delivery policy run in virtual time (``bench lads``'s arms).
"""
