"""Fault tools: ``proxy`` (a TCP proxy whose faults switch at run time), ``mixed_load`` (the
mixed workload of ``bench faults`` and its user agents), ``report`` (``bench faults``'s figures
and table), ``partition`` (the one-sided partition check) and ``version_marks`` (documents that
say which write they are, for freshness checks).
"""
