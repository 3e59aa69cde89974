"""``dynbranch bench interference``: canonical stretch grows with the number and the context of
co-resident fills, and the fitted slopes are the admission prices' parameters."""

from __future__ import annotations

from loadgen.bench.interference import measure


async def test_stretch_grows_with_fills_and_their_context_and_the_slopes_are_positive() -> None:
    result = await measure(quick=True)
    by_n = [result["stretch_by_fills"][k] for k in ("1", "3", "12", "24", "48")]
    by_c = [result["stretch_by_context_at_24"][k] for k in ("64", "850", "2048", "4096")]
    shares = [result["fill_kv_share_by_context_at_24"][k] for k in ("64", "850", "2048", "4096")]
    assert by_n == sorted(by_n) and by_n[0] > 0
    assert by_c == sorted(by_c) and shares == sorted(shares)
    assert result["slot_stretch"] > 0 and result["kv_stretch"] > 0 and result["simulated"]
    stalls = result["prefill_stall_s"]  # a prefill stalls the decode, more with more of them
    assert 0 < stalls["1"] < stalls["4"] and result["prefill_s_per_token"] > 0
    check = result["check"]  # the fit predicts a point it was not fitted on
    assert abs(check["predicted_stretch"] - check["measured_stretch"]) \
        <= 0.25 * check["measured_stretch"]
