"""The agent settings saved beside a policy (`arborl_agent.json`): written in one place
(`save_agent_settings`, by `arborl train`, `arborl sft` and Ray exports) and read in one
place (`load_agent_settings`, by `arborl eval`/`rollout`/`search`/`rm`), so a checkpoint is
prompted at evaluation time exactly as it was during training.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from arborl.agent.config import AgentConfig

AGENT_FILE = "arborl_agent.json"


def agent_settings_text(agent: AgentConfig) -> str:
    """The JSON text of `agent`'s settings (what `save_agent_settings` writes)."""
    return json.dumps(dataclasses.asdict(agent), default=str)


def save_agent_settings(policy_dir: str | Path, agent: AgentConfig) -> Path:
    """Write `policy_dir/arborl_agent.json`; returns its path."""
    path = Path(policy_dir) / AGENT_FILE
    path.write_text(agent_settings_text(agent))
    return path


def load_agent_settings(policy_dir: str | Path | None) -> dict:
    """The `AgentConfig` fields saved with a policy ({} when there is no file). Unknown
    keys (from another arborl version) and `summary_fn` (code, never loaded) are dropped."""
    if not policy_dir:
        return {}
    path = Path(policy_dir) / AGENT_FILE
    if not path.is_file():
        return {}
    known = {f.name for f in dataclasses.fields(AgentConfig)}
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if k in known and k != "summary_fn"}
