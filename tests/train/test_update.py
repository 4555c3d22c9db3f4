"""The PPO update: token-budget micro-batches, exact gradient accumulation, NaN guard."""

import copy
from dataclasses import replace

import pytest
import torch

from arborl.agent import AgentConfig
from arborl.data import Batch
from arborl.generation.hf import HFBackend
from arborl.models import load_policy
from arborl.rollout import RolloutConfig, run_rollout
from arborl.train.config import AlgoConfig
from arborl.train.update import group_prompts, micro_batches, ppo_update, response_logp


def _toy_batch(prompts, responses):
    """Step-view rows with the given real prompt / response lengths (P=5, A=4)."""
    P, A = 5, 4
    n = len(prompts)
    attn = torch.zeros(n, P + A, dtype=torch.long)
    resp = torch.zeros(n, A)
    for i, (p, a) in enumerate(zip(prompts, responses)):
        attn[i, P - p : P + a] = 1
        resp[i, :a] = 1
    tensors = {"input_ids": torch.zeros(n, P + A, dtype=torch.long), "attention_mask": attn}
    tensors["response_mask"] = resp
    tensors["row"] = torch.arange(n)
    return Batch.from_dict(tensors, info={"prompt_length": P, "response_length": A})


def test_micro_batches_respect_the_budget_and_keep_row_order():
    # (prompt, response): width of a slice = max prompt + max response.
    b = _toy_batch([5, 1, 2, 3, 5, 1], [1, 4, 2, 1, 4, 1])
    mbs = micro_batches(b, max_tokens=12)
    # Greedy: rows 0-1 -> width 5 + 4 = 9, x2 = 18 > 12 so row 0 alone (6); rows 1-2 ->
    # (2 + 4) x 2 = 12 fits, + row 3 -> (3 + 4) x 3 = 21 no; rows 3-4 -> (5 + 4) x 2 no;
    # row 4 alone (9); rows 4-5 -> 9 x 2 no; row 5 alone.
    assert [mb.tensors["row"].tolist() for mb in mbs] == [[0], [1, 2], [3], [4], [5]]
    for mb in mbs:
        width = int(mb.tensors["attention_mask"][:, :5].sum(-1).max()) + int(
            mb.tensors["response_mask"].sum(-1).max()
        )
        assert width * len(mb) <= 12 or len(mb) == 1
    assert torch.cat([mb.tensors["row"] for mb in micro_batches(b, 10**6)]).tolist() == list(
        range(6)
    )
    # A row over the budget still gets a slice of its own.
    assert [len(mb) for mb in micro_batches(b, 1)] == [1] * 6


@pytest.fixture(scope="module")
def rollout():
    model, tok = load_policy("tiny-0.1m")
    cfg = RolloutConfig(num_tasks=2, group_size=2, max_turns=3, max_new_tokens=4, seed=1)
    agent = AgentConfig(memory="last_k", memory_k=1, include_instruction=False)
    res = run_rollout(HFBackend(model, tok), tok, "arborl/Maze-v0", None, cfg, agent)
    b = res.batch
    gen = torch.Generator().manual_seed(0)
    b["adv"] = torch.randn(len(b), generator=gen)
    b["weight"] = torch.ones(len(b))
    return model, b


def _one_step(model, batch, algo):
    model = copy.deepcopy(model)
    model.train()
    # Plain SGD: the weight change is lr x gradient. (Adam's g / sqrt(v) would amplify
    # float-rounding noise on near-zero gradients into full-size steps.)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    torch.manual_seed(0)  # dropout, if any, draws the same masks in both runs
    up = ppo_update(model, opt, batch, algo, 1.0, torch.Generator().manual_seed(0), 0.0)
    return model, up


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"])
def test_gradient_accumulation_is_exact(rollout, agg):
    model, batch = rollout
    algo = replace(AlgoConfig(), minibatch_size=len(batch), loss_agg=agg, grad_clip=0.0)
    big, up_big = _one_step(model, batch, replace(algo, micro_batch_tokens=10**9))
    small, up_small = _one_step(model, batch, replace(algo, micro_batch_tokens=1))
    assert up_big.stats["actor/optimizer_steps"] == up_small.stats["actor/optimizer_steps"] == 1
    assert up_big.stats["actor/grad_norm"] == pytest.approx(
        up_small.stats["actor/grad_norm"], rel=1e-5
    )
    moved = 0.0
    for (name, p_big), p_small, p0 in zip(
        big.named_parameters(), small.parameters(), model.parameters()
    ):
        assert torch.allclose(p_big, p_small, atol=1e-5), name
        moved = max(moved, float((p_big - p0).detach().abs().max()))
    assert moved > 1e-4  # the step did change the weights


def test_nan_advantage_skips_the_update(rollout):
    model, batch = rollout
    bad = batch[torch.arange(len(batch))]
    adv = bad.tensors["adv"].clone()
    adv[0] = float("nan")
    bad["adv"] = adv
    algo = replace(AlgoConfig(), minibatch_size=len(batch))
    after, up = _one_step(model, bad, algo)
    assert up.skipped == 1 and up.stats["actor/optimizer_steps"] == 0
    for p, p0 in zip(after.parameters(), model.parameters()):
        assert torch.equal(p, p0)


def test_diagnostics_are_logged_and_entropy_stays_out_of_the_loss(rollout, monkeypatch):
    model, batch = rollout
    algo = replace(AlgoConfig(), minibatch_size=len(batch), loss_agg="token-mean")
    assert algo.entropy_coef == 0
    after, up = _one_step(model, batch, algo)
    st = up.stats
    # entropy of the start model, token-mean over the response tokens: measured by hand
    prompt_len = int(batch.info["prompt_length"])
    with torch.no_grad():
        _, ent, a = response_logp(model, batch, prompt_len, 1.0, True)
    mask = batch.tensors["response_mask"][:, :a].bool()
    assert st["actor/entropy"] == pytest.approx(float(ent[mask].mean()), rel=1e-4)
    assert st["actor/entropy"] > 0.1
    # one step on the rollout policy itself: ratio 1, k1 and k3 KL ~0, nothing clipped
    assert abs(st["actor/approx_kl"]) < 1e-4 and 0 <= st["actor/approx_kl_k3"] < 1e-6
    assert st["actor/clipfrac"] == 0.0
    assert st["actor/tokens"] == float(batch.tensors["response_mask"].sum())
    assert st["actor/grad_norm"] > 0
    # With entropy_coef=0 the entropy is a diagnostic: zeroing it leaves the step unchanged
    monkeypatch.setattr(
        "arborl.algos.entropy_from_logits", lambda logits: torch.zeros(logits.shape[:-1])
    )
    again, up0 = _one_step(model, batch, algo)
    assert up0.stats["actor/entropy"] == 0.0
    for p, q in zip(after.parameters(), again.parameters()):
        assert torch.equal(p, q)
    # ...while a bonus on the real entropy changes it
    monkeypatch.undo()
    bonus, _ = _one_step(model, batch, replace(algo, entropy_coef=0.1))
    assert any(not torch.equal(p, q) for p, q in zip(after.parameters(), bonus.parameters()))


def test_group_prompts_and_their_micro_batch_cost():
    b = _toy_batch([5, 5, 5, 5, 5, 5], [2, 2, 2, 2, 2, 2])
    ids = b.tensors["input_ids"].clone()
    ids[:, :5] = torch.tensor([[1], [2], [1], [3], [2], [1]])  # prompts a b a c b a
    b["input_ids"] = ids
    grouped, groups = group_prompts(b)
    # first-occurrence order, stable within a prompt: a a a b b c
    assert grouped.tensors["row"].tolist() == [0, 2, 5, 1, 4, 3]
    assert groups == [0, 0, 0, 1, 1, 2]
    # 6 rows over 3 prompts: 3 x 5 prompt + 6 x 2 response = 27 tokens, not 6 x 7 = 42
    assert [len(mb) for mb in micro_batches(grouped, 27, groups)] == [6]
    assert [len(mb) for mb in micro_batches(grouped, 27)] == [3, 3]


def test_grouped_prompts_go_shortest_first():
    """A micro-batch is cut to its longest prompt, so groups go by prompt length (ties in
    first occurrence order): prompts of 5, 2, 5, 3 real tokens -> 2, 3, then the 5s."""
    b = _toy_batch([5, 2, 5, 3, 2, 5], [1, 1, 1, 1, 1, 1])
    ids = b.tensors["input_ids"].clone()
    ids[:, :5] = torch.tensor([[1], [2], [3], [4], [2], [1]])  # prompts a b c d b a
    b["input_ids"] = ids
    grouped, groups = group_prompts(b)
    assert grouped.tensors["row"].tolist() == [1, 4, 3, 0, 5, 2]  # b b d a a c
    assert groups == [0, 0, 1, 2, 2, 3]


def _plain_micro_batches(shard, max_tokens):
    """Micro-batches in schedule order, rows not regrouped by prompt."""
    return micro_batches(shard, max_tokens) if shard is not None and len(shard) else []


def test_grouped_update_equals_the_plain_one(rollout, monkeypatch):
    """Rows regrouped by prompt (and encoded once per prompt) give the same step as the
    rows in schedule order, each scored on its own: loss, gradient norm and weights agree
    to float rounding."""
    import arborl.models.scoring as scoring
    import arborl.train.update as update

    model, batch = rollout
    batch = batch.repeat(3, interleave=False)  # every prompt repeats (a GRPO group)
    algo = replace(AlgoConfig(), minibatch_size=len(batch), grad_clip=0.0)
    grouped, up_grouped = _one_step(model, batch, algo)
    monkeypatch.setattr(update, "_grouped_micro_batches", _plain_micro_batches)
    monkeypatch.setattr(scoring, "takes_4d_mask", lambda model: False)
    plain = replace(algo, micro_batch_tokens=1)  # one row per forward: nothing shared
    ref, up_ref = _one_step(model, batch, plain)
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert up_grouped.stats[key] == pytest.approx(up_ref.stats[key], rel=1e-5, abs=1e-7)
    for (name, p), q in zip(grouped.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name


def test_critic_scores_each_state_once_with_the_numbers_of_a_forward_per_row(rollout, monkeypatch):
    """Rows of one state (same prompt) share one critic forward: values, and the weights
    after a critic fit, equal those of one forward per row to float rounding."""
    import arborl.train.update as update
    from arborl.models import ValueModel
    from arborl.train.update import critic_fit, critic_values

    _, batch = rollout
    batch = batch.repeat(3, interleave=False)  # every state 3 times
    gen = torch.Generator().manual_seed(1)
    batch["returns"] = torch.rand(len(batch), generator=gen)
    batch["old_values"] = torch.zeros(len(batch))
    critic = ValueModel.from_policy_spec("tiny-0.1m", seed=3)
    forwards = []
    hook = critic.register_forward_hook(lambda _m, args, _o: forwards.append(len(args[0])))
    with torch.no_grad():
        shared = critic_values(critic, batch, 10**6)
        one_per_row = torch.cat([critic_values(critic, batch[i : i + 1], 10**6)
                                 for i in range(len(batch))])  # fmt: skip
    hook.remove()
    assert forwards[0] * 3 <= len(batch)  # one forward over the distinct states only
    assert torch.allclose(shared, one_per_row, atol=1e-6)

    algo = replace(AlgoConfig(), grad_clip=0.0, value_clip=None)

    def fit(max_tokens):
        c = copy.deepcopy(critic)
        opt = torch.optim.SGD(c.parameters(), lr=1.0)
        up = critic_fit(c, opt, [batch], batch[:1], replace(algo, micro_batch_tokens=max_tokens))
        return c, up

    grouped, up_grouped = fit(10**6)
    monkeypatch.setattr(update, "_grouped_micro_batches", _plain_micro_batches)
    ref, up_ref = fit(1)  # a row per micro-batch: nothing shared
    assert up_grouped.stats["critic/value_loss"] == pytest.approx(
        up_ref.stats["critic/value_loss"], rel=1e-5
    )
    for (name, p), q in zip(grouped.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name


def test_a_registered_loss_trains_through_the_update_with_no_edit_to_it(rollout):
    """`algo.loss` names a record; the update calls its function. A loss registered here
    (half of PPO-clip) moves SGD weights by exactly half as much; CISPO on-policy (every
    ratio 1, inside PPO's clip range, weight 1) takes PPO-clip's step."""
    from arborl.algos.policy_loss import POLICY_LOSSES, ppo_clip, register_policy_loss

    model, batch = rollout
    algo = replace(AlgoConfig(), minibatch_size=len(batch), grad_clip=0.0)

    @register_policy_loss("half_ppo")
    def half_ppo(logp, old_logp, adv, mask, algo, options, **agg):
        loss, stats = ppo_clip(logp, old_logp, adv, mask, algo, options, **agg)
        return 0.5 * loss, stats

    try:
        ppo, up = _one_step(model, batch, algo)
        half, up_half = _one_step(model, batch, replace(algo, loss="half_ppo"))
        cispo, _ = _one_step(model, batch, replace(algo, loss="cispo"))
    finally:
        POLICY_LOSSES.unregister("half_ppo")
    assert up_half.stats["actor/pg_loss"] == pytest.approx(0.5 * up.stats["actor/pg_loss"])
    for p_ppo, p_half, p_cispo, p0 in zip(
        ppo.parameters(), half.parameters(), cispo.parameters(), model.parameters()
    ):
        assert torch.allclose(p_half - p0, 0.5 * (p_ppo - p0), atol=1e-6)
        assert torch.allclose(p_cispo, p_ppo, atol=1e-5)
