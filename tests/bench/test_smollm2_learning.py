"""bench/smollm2_learning.py's arithmetic: the SFT gain over an all-lost baseline, the RSS."""

import pytest

from ._scripts import load_script

bench = load_script("smollm2_learning")


def test_gain_over_an_all_lost_baseline_is_the_wins_with_a_paired_interval():
    # 8 of 48 tasks won after, none before: every difference is 1 (8x) or 0 (40x);
    # mean 1/6, sd = sqrt(8 * (5/6)^2 + 40 * (1/6)^2) / sqrt(47) = 0.37662,
    # half-width 1.96 * 0.37662 / sqrt(48) = 0.10655.
    after = {"success": 8 / 48, "episodes": 48.0}
    gain = bench.gain_over_zero(after)
    assert gain["gain"] == pytest.approx(1 / 6)
    assert gain["gain_lo"] == pytest.approx(1 / 6 - 0.10655, abs=1e-4)
    assert gain["gain_hi"] == pytest.approx(1 / 6 + 0.10655, abs=1e-4)
    assert (gain["improved"], gain["worsened"], gain["tasks"]) == (8.0, 0.0, 48.0)


def test_peak_rss_is_read_from_a_time_v_log(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("held-out success\n\tMaximum resident set size (kbytes): 5132168\n")
    assert bench.peak_rss_mb(log) == pytest.approx(5132168 / 1024)
    log.write_text("no time -v here\n")
    assert bench.peak_rss_mb(log) is None
