# Runs inside the package's venv after pip: the engine must import and the PDDL planner
# must be present (it is what compiles fast-downward, the slow part of the install).
set -euo pipefail
python -c "import alfworld, textworld, textworld.envs.pddl; from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos; print('alfworld ok', textworld.__version__)"
