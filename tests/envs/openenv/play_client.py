"""Play one episode of an arborl env through openenv-core's own client.

Run with the openenv venv's python: `python play_client.py BASE_URL SEED ACTIONS_JSON`.
BASE_URL carries the token as its path (`http://127.0.0.1:PORT/<token>`): the stock
client sends no headers. Prints one JSON line: per step the reward, done and
observation, plus the state, so the test can compare them with arborl's own run.
"""

import json
import sys

from openenv.core import GenericEnvClient

base_url, seed, actions = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
out = {"steps": []}
with GenericEnvClient(base_url=base_url).sync() as env:
    first = env.reset(seed=seed)
    out["reset"] = {"observation": first.observation, "reward": first.reward, "done": first.done}
    for action in actions:
        r = env.step({"action": action})
        out["steps"].append({"observation": r.observation, "reward": r.reward, "done": r.done})
    out["state"] = env.state()
print(json.dumps(out))
