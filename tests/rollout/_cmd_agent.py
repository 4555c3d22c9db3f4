"""A command-line agent: reads the task and the gateway from its environment, makes one
call with the `openai` client, prints its reward as JSON (episode 1 exits with an error)."""

import json
import os
import sys

import openai

task = json.loads(os.environ["ARBORL_TASK"])
client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL, OPENAI_API_KEY
r = client.chat.completions.create(
    model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=4
)
if task["episode"] == 1:
    sys.exit("no luck")
print("some log line")
print(json.dumps(len(r.choices[0].message.content) % 2))
