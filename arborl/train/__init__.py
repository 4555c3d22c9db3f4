"""Training: the one RL loop and what it is made of, plus the SFT and reward-model
trainers.

Where a run starts: `arborl train` -> `arborl.train.rl.RLTrainer` (the loop) over an
engine (`arborl.train.engine`: local, vLLM, or Ray from `arborl.distributed`). The loop's
parts: `config` (the `TrainConfig` schema), `build` (every model, optimizer and pool, built
one way), `advantages` (one `Algorithm` record per `algo.name`), `update` (the PPO-family
update for 1 process or N ranks), `evaluate` (the one held-out evaluation), `checkpoint`,
`runlog` (run folder, metrics, step timing), `sft` and `rm`. Nothing is imported here, so
importing one module does not load the others.
"""
