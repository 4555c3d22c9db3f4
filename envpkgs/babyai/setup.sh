# Runs inside the package's venv after pip: the BabyAI levels and the bot must import.
set -euo pipefail
python -c "import gymnasium as gym, minigrid; from minigrid.utils.baby_ai_bot import BabyAIBot; e = gym.make('BabyAI-GoToLocal-v0'); e.reset(seed=0); print('babyai ok', minigrid.__version__)"
