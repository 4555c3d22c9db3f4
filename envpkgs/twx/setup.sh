# Runs inside the package's venv after pip: Java must be on PATH and the JVM must start.
set -euo pipefail
if ! command -v java >/dev/null; then
  echo "TextWorld-Express needs Java 8+ on PATH: install it (apt-get install -y default-jre-headless)" >&2
  exit 1
fi
java -version 2>&1 | head -1
python -c "from textworld_express import TextWorldExpressEnv as E; e = E(envStepLimit=5); o, i = e.reset(seed=0, gameFold='train', gameName='coin', gameParams=''); print('twx ok', len(i['validActions']))"
