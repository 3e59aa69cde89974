"""Why an admission arm did what it did (issue 37, item 6), from a ``bench arms`` cell: per arm
the fills issued, consumed and discarded per workflow and what the engines felt; for the priced
controller its own account merged over seeds (``Ledger.summary``: Action 0's answers by rule,
Action 1's left-out candidates by cause, admitted per opened branch, median C, G and p*, p̃
against its realised rate by rank); for the static rule its answers by cause."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

#: Counters an account's seeds add up.
_SUMMED = ("branches", "opened", "offered", "admitted", "consumed")
#: Medians an account gives per seed (the merged figure is their mean over seeds).
_MEDIANS = ("cost_ms_median", "gain_ms_median", "break_even_median")


def merge_accounts(accounts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Seeds' priced-controller accounts (``Ledger.summary``) as one: counts summed, medians
    averaged over seeds, p̃ and its realised rates by rank weighted by their counts, and the
    1.25x check redone on the merged table."""
    from services.admission.ledger import STRICT_RANKS, consistent, within

    accounts = [a for a in accounts if a]
    if len(accounts) == 1:
        return dict(accounts[0])
    if "refused_by" in accounts[0]:  # the static rule: answers and refusals by cause
        return {key: _sum_counts([a.get(key, {}) for a in accounts])
                for key in ("gate", "refused_by")} | {"seeds": len(accounts)}
    out: dict[str, Any] = {k: sum(a.get(k, 0) for a in accounts) for k in _SUMMED}
    for key in ("gate", "not_admitted"):
        out[key] = _sum_counts([a.get(key, {}) for a in accounts])
    out["admitted_per_opened"] = (round(out["admitted"] / out["opened"], 3)
                                  if out["opened"] else None)
    for key in _MEDIANS:
        found = [a[key] for a in accounts if a.get(key) is not None]
        out[key] = round(statistics.fmean(found), 4) if found else None
    for key in ("p_tilde_by_rank_warm_strict", "p_tilde_by_rank"):
        out[key] = _merge_ranks([a.get(key, {}) for a in accounts])
    strict = out["p_tilde_by_rank_warm_strict"]
    out["p_tilde_within_1_25x_warm_strict"] = within(strict, 1.25, STRICT_RANKS)
    out["p_tilde_consistent_1_25x_warm_strict"] = consistent(strict, 1.25, STRICT_RANKS)
    out["warm_strict"] = accounts[0].get("warm_strict")
    out["seeds"] = len(accounts)
    return out


def _sum_counts(counts: Sequence[Mapping[str, int]]) -> dict[str, int]:
    merged = Counter[str]()
    for c in counts:
        merged.update(c)  # keeps zero counts (Counter addition would drop them)
    return dict(sorted(merged.items()))


#: Per rank: each rate and the count it is over (``ledger.by_rank``).
_RATES = {"p_tilde": "admitted", "useful": "admitted", "pi_sel": "offered",
          "selected": "offered", "pi_use": "selected_admitted", "used": "selected_admitted"}


def _merge_ranks(tables: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rank in sorted({r for t in tables for r in t}, key=int):
        rows = [t[rank] for t in tables if rank in t]
        merged: dict[str, Any] = {n: sum(r.get(n) or 0 for r in rows)
                                  for n in ("admitted", "offered", "selected_admitted")}
        for rate, count in _RATES.items():
            weighted = [(r[rate], r.get(count) or 0) for r in rows if r.get(rate) is not None]
            total = sum(w for _, w in weighted)
            merged[rate] = round(sum(v * w for v, w in weighted) / total, 4) if total else None
        out[rank] = merged
    return out


def decision_record(result: Mapping[str, Any]) -> dict[str, Any]:
    """Why each admission arm of a cell did what it did (issue 37, item 6): per arm the fills
    issued and discarded per workflow and the engines' load; for the priced arm its Action 0
    answers by rule, Action 1's refusals by cause, candidates admitted per opened branch, the
    median price C beside the measured marginal cost of a fill, the median gain G and
    break-even p*, and p̃ against its realised rate by rank (``ledger``); for the static rule
    its answers by cause."""
    arms = result.get("arms", {})
    record: dict[str, Any] = {"marginal_fill_cost_s": result.get("marginal_fill_cost_s"),
                              "rate_per_s": result.get("rate_per_s"), "arms": {}}
    for name, arm in arms.items():
        row: dict[str, Any] = {k: arm.get(k) for k in ("fills_issued", "fills_consumed",
                                                        "fills_discarded", "branches_opened")}
        row["engine_load"] = arm.get("engine_load", {})
        account = arm.get("admission") or {}
        if "per_seed" in account:
            account = merge_accounts(account["per_seed"])
        if account:
            row["account"] = account
        record["arms"][name] = row
    return record


__all__ = ["decision_record", "merge_accounts"]
