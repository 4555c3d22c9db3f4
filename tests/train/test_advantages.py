"""compute_advantages on a hand-built step-view Batch, numbers worked out by hand below.

Rows (interleaved on purpose, so broadcasting must follow traj_id, not row order):
  row  traj  step  group  reward  anchor  done
   0    a     0     g0     0.0     s0     no
   1    b     0     g0     0.0     s0     yes
   2    a     1     g0     1.0     s1     yes
   3    c     0     g1     2.0     t0     yes
   4    d     0     g1     2.0     t0     yes
Trajectory returns: a = 1, b = 0, c = 2, d = 2.
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from arborl import algos
from arborl.data import Batch
from arborl.train.advantages import compute_advantages, episode_lengths
from arborl.train.config import AlgoConfig, load_train_config


def _batch(truncated=(False,) * 5) -> tuple[Batch, torch.Tensor]:
    rewards = torch.tensor([0.0, 0.0, 1.0, 2.0, 2.0])
    anchor = np.empty(5, dtype=object)
    anchor[:] = ["s0", "s0", "s1", "t0", "t0"]
    meta = {
        "traj_id": np.array(["a", "b", "a", "c", "d"]),
        "step": np.array([0, 0, 1, 0, 0]),
        "group_id": np.array(["g0", "g0", "g0", "g1", "g1"]),
        "anchor": anchor,
        "done": np.array([False, True, True, True, True]),
        "truncated": np.array(truncated),
    }
    return Batch.from_dict({"step_reward": rewards}, meta, {"view": "step"}), rewards


def _algo(name, **kw):
    return AlgoConfig(name=name, **kw)


def test_grpo_broadcasts_one_value_per_trajectory():
    b, r = _batch()
    adv, ret, _ = compute_advantages(b, r, _algo("grpo"))
    # g0: mean 0.5, unbiased std sqrt((0.25 + 0.25) / 1) = 0.7071 -> a = +0.7071, b = -0.7071;
    # g1: c = d -> 0. Both rows of a get a's value.
    s = 0.5 / math.sqrt(0.5)
    assert ret is None
    assert torch.allclose(adv, torch.tensor([s, -s, s, 0.0, 0.0]), atol=1e-5)
    adv, _, _ = compute_advantages(b, r, _algo("grpo", norm_by_std=False))
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.5, 0.0, 0.0]))


def test_rloo_and_reinforce_pp_rows():
    b, r = _batch()
    adv, _, _ = compute_advantages(b, r, _algo("rloo"))
    # a: 1 - mean(others in g0) = 1 - 0 = 1; b: 0 - 1 = -1; c, d: 2 - 2 = 0.
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 1.0, 0.0, 0.0]))
    adv, _, _ = compute_advantages(b, r, _algo("reinforce_pp"))
    # Whitened over the 4 trajectories (1, 0, 2, 2): mean 1.25, unbiased std sqrt(2.75/3).
    std = math.sqrt(((1 - 1.25) ** 2 + 1.25**2 + 2 * 0.75**2) / 3)
    w = [(x - 1.25) / std for x in (1.0, 0.0, 2.0, 2.0)]
    assert torch.allclose(adv, torch.tensor([w[0], w[1], w[0], w[2], w[3]]), atol=1e-5)


def test_gigpo_episode_plus_step_level():
    b, r = _batch()
    adv, ret, stats = compute_advantages(
        b, r, _algo("gigpo", gigpo_gamma=0.5, gigpo_omega=1.0, norm_by_std=False)
    )
    # Episode level (Dr.GRPO): [0.5, -0.5, 0.5, 0, 0].
    # Step returns (gamma 0.5): a0 = 0 + 0.5 * 1 = 0.5, b0 = 0, a1 = 1, c0 = d0 = 2.
    # Anchor clusters: (g0, s0) = rows 0, 1 (0.5, 0) -> mean 0.25 -> +0.25, -0.25;
    # (g0, s1) = row 2 alone -> 0; (g1, t0) = rows 3, 4 equal -> 0.
    assert ret is None
    assert torch.allclose(adv, torch.tensor([0.75, -0.75, 0.5, 0.0, 0.0]))
    assert stats["adv/step_abs_mean"] == pytest.approx((0.25 + 0.25) / 5)


def _gae_batch(truncated_b: bool):
    """Trajectories a (rewards 0, 1) and b (reward 0) in rows [a0, b0, a1]."""
    meta = {
        "traj_id": np.array(["a", "b", "a"]),
        "step": np.array([0, 0, 1]),
        "group_id": np.array(["g", "g", "g"]),
        "done": np.array([False, True, True]),
        "truncated": np.array([False, truncated_b, False]),
    }
    rewards = torch.tensor([0.0, 0.0, 1.0])
    return Batch.from_dict({"step_reward": rewards}, meta), rewards


def test_ppo_gae_by_hand_gamma_half_lambda_one():
    values = torch.tensor([0.2, 0.4, 0.6])  # V(a0), V(b0), V(a1)
    algo = _algo("ppo", gamma=0.5, lam=1.0)
    b, r = _gae_batch(truncated_b=False)
    adv, ret, _ = compute_advantages(b, r, algo, values)
    # a1: delta = 1 - 0.6 = 0.4 -> A = 0.4, R = 1.0.
    # a0: delta = 0 + 0.5 * 0.6 - 0.2 = 0.1 -> A = 0.1 + 0.5 * 1 * 0.4 = 0.3, R = 0.5.
    # b0 (terminal): delta = 0 - 0.4 -> A = -0.4, R = 0.
    raw = torch.tensor([0.3, -0.4, 0.4])
    assert torch.allclose(ret, torch.tensor([0.5, 0.0, 1.0]), atol=1e-6)
    assert torch.allclose(adv, (raw - raw.mean()) / (raw.std() + 1e-6), atol=1e-5)

    # Truncated b0 is not terminal: it bootstraps from its own value, r' = 0 + 0.5 * 0.4.
    # A = 0.2 - 0.4 = -0.2, R = 0.2; trajectory a is unchanged.
    b, r = _gae_batch(truncated_b=True)
    adv, ret, _ = compute_advantages(b, r, algo, values)
    raw = torch.tensor([0.3, -0.2, 0.4])
    assert torch.allclose(ret, torch.tensor([0.5, 0.2, 1.0]), atol=1e-6)
    assert torch.allclose(adv, (raw - raw.mean()) / (raw.std() + 1e-6), atol=1e-5)


def test_ppo_without_values_says_what_is_missing():
    b, r = _gae_batch(False)
    with pytest.raises(ValueError, match="critic values"):
        compute_advantages(b, r, SimpleNamespace(name="ppo"))


def test_episode_lengths_per_row():
    b, _ = _batch()
    assert episode_lengths(b).tolist() == [2.0, 1.0, 2.0, 1.0, 1.0]


def test_one_record_per_algorithm_with_one_name():
    from arborl.train.advantages import ALGORITHMS, get_algorithm
    from arborl.train.build import needs_critic
    from arborl.train.config import load_train_config

    names = {"ppo", "grpo", "drgrpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gigpo"}
    assert names <= set(ALGORITHMS.names())
    assert {n: get_algorithm(n).level for n in ("ppo", "grpo", "gigpo")} == {
        "ppo": "token", "grpo": "episode", "gigpo": "step"
    }  # fmt: skip
    assert get_algorithm("ppo").estimator is algos.gae  # one name: no "gae" alias
    assert "gae" not in ALGORITHMS
    assert [n for n in names if get_algorithm(n).needs_critic] == ["ppo"]
    # `algo=NAME` applies the record's defaults; the name alone keeps the section's
    ppo = load_train_config(["algo=ppo"])
    assert (ppo.algo.name, ppo.algo.gamma, ppo.algo.ppo_epochs, ppo.algo.drop_zero_adv) == (
        "ppo", 0.95, 2, False
    )  # fmt: skip
    assert needs_critic(ppo) and not needs_critic(load_train_config(["algo=rloo"]))
    assert load_train_config(["algo=drgrpo"]).algo.norm_by_std is False


def test_an_episode_algorithm_registered_at_run_time_is_selectable():
    from arborl.config import ConfigError
    from arborl.train.advantages import ALGORITHMS, episode_algorithm
    from arborl.train.config import load_train_config

    with pytest.raises(
        ConfigError, match=r"algo='centered' is not registered; choose one of \[.*'grpo'"
    ):
        load_train_config(["algo=centered"])

    @episode_algorithm("centered", defaults={"lr": 3e-5})
    def centered(scores, group_ids, algo):  # r - mean over the whole batch
        return scores - scores.mean()

    try:
        cfg = load_train_config(["algo=centered"])
        assert (cfg.algo.name, cfg.algo.lr) == ("centered", 3e-5)
        b, r = _batch()
        adv, ret, _ = compute_advantages(b, r, cfg.algo)
        assert ret is None
        # returns a=1, b=0, c=2, d=2 (mean 1.25), broadcast to rows a, b, a, c, d
        assert torch.allclose(adv, torch.tensor([-0.25, -1.25, -0.25, 0.75, 0.75]))
    finally:
        ALGORITHMS.unregister("centered")


def test_registry_backed_fields_name_the_registry_and_suggest():
    from arborl.algos.losses import AGG_MODES
    from arborl.config import ConfigError, allowed_names
    from arborl.train.config import load_train_config

    for override, hint in (
        ("algo.kl_estimator=lowvar_kl", "low_var_kl"),
        ("algo.loss_agg=token_mean", "token-mean"),
        ("env.pool_mode=subproc", "subprocess"),
        ("trainer.engine=lokal", "local"),
    ):
        with pytest.raises(ConfigError, match=f"Did you mean '{hint}'"):
            load_train_config([override])
    AGG_MODES.register(
        "half-token-mean", lambda *a, **k: 0.5 * AGG_MODES.get("token-mean")(*a, **k)
    )
    try:  # a plug-in registered at run time is accepted and listed
        assert load_train_config(["algo.loss_agg=half-token-mean"]).algo.loss_agg == (
            "half-token-mean"
        )
        import dataclasses

        from arborl.train.config import AlgoConfig

        meta = {f.name: f.metadata for f in dataclasses.fields(AlgoConfig)}["loss_agg"]
        assert "half-token-mean" in allowed_names(meta)
    finally:
        AGG_MODES.unregister("half-token-mean")
    with pytest.raises(ConfigError, match="trainer.backend' was renamed; set trainer.engine"):
        load_train_config(["trainer.backend=ray"])
    with pytest.raises(ConfigError, match="renamed; set ray.num_train_ranks"):
        load_train_config(["trainer.num_train_ranks=2"])


def test_raft_keeps_the_won_episodes_with_advantage_one():
    b, r = _batch()
    # won episodes: a (its last row, 2) and c (row 3); b and d lost
    b["won"] = torch.tensor([False, False, True, True, False])
    adv, ret, stats = compute_advantages(b, r, load_train_config(["algo=raft"]).algo)
    assert ret is None and adv.tolist() == [1.0, 0.0, 1.0, 1.0, 0.0]  # both rows of a
    assert stats["raft/episodes_kept"] == 0.5


def test_informative_groups_drop_equal_returns_at_their_own_scale():
    from arborl.train.advantages import informative_groups

    b, r = _batch()  # g0: returns a=1, b=0 (mixed); g1: c = d = 2 (equal)
    keep, dropped = informative_groups(b, r)
    assert keep.tolist() == [True, True, True, False, False] and dropped == 0.5
    # 1.0 summed in another order (0.1 x 10 vs 1.0) is still "equal": not informative
    r2 = torch.tensor([0.0, 0.0, 1.0, 2.0, 2.0], dtype=torch.float64)
    r2[3] = sum([0.2] * 10)  # 2.0000000000000004
    keep, dropped = informative_groups(b, r2)
    assert keep.tolist() == [True, True, True, False, False]


def test_returns_equal_up_to_float32_rounding_get_no_advantage_in_the_trainer():
    # step rewards are float32; 0.1 + 0.9 and 0.3 + 0.7 differ only by float32 rounding
    b, _ = _batch()
    r = torch.tensor([0.1, 0.3, 0.9, 2.0, 2.0], dtype=torch.float32)  # a = 0.1 + 0.9, b = 0.3
    r[1] = torch.tensor(0.3, dtype=torch.float32) + torch.tensor(0.7, dtype=torch.float32)
    from arborl.train.advantages import informative_groups

    for name in ("grpo", "drgrpo", "rloo"):
        adv, _, _ = compute_advantages(b, r, _algo(name))
        assert adv.abs().max() == 0.0, name
    keep, dropped = informative_groups(b, r)
    assert not keep.any() and dropped == 1.0
