"""The help texts `dynbranch report` and its parser share (no heavy imports: the CLI builds
its parser from them)."""

FULL_HELP = ("48 workflows x 5 seeds per cell (more at high rates) at idle, busy and saturated "
             "load, a serial loop, every arm, both recurrence profiles; the C3 study (Routing "
             "and ReAct across λ 0.8-16/s, the phased trace, issue 37's checks), the "
             "replay-rate sweep, and the LADS bench in full (default: the quick matrix, 24 "
             "workflows at idle)")
ONLY_HELP = ("c3: only the C3 study: Routing and ReAct across λ and at every load level (idle, "
             "moderate, busy, saturated), Sub-Agent and HCI at idle, the phased trace, and "
             "issue 37's acceptance checks")

__all__ = ["FULL_HELP", "ONLY_HELP"]
