# Runs inside the package's venv after pip: Java must be on PATH and the JVM must start.
set -euo pipefail
if ! command -v java >/dev/null; then
  echo "ScienceWorld needs Java 8+ on PATH: install it (apt-get install -y default-jre-headless)" >&2
  exit 1
fi
java -version 2>&1 | head -1
JAVA_TOOL_OPTIONS="-Xmx400m -XX:+UseSerialGC" python -c "from scienceworld import ScienceWorldEnv as E; e = E('', envStepLimit=5); print('scienceworld ok', len(e.get_task_names()), 'tasks'); e.close()"
