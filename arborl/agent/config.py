"""`AgentConfig`: how observations become prompts and completions become actions.

One dataclass for the whole agent layer (memory, prompt layout, action format) so that a
run's prompt format is written down in its resolved config and checked before any work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from arborl.registry import Registry, load_entry_point

MEMORIES: Registry = Registry("agent.memory", error=ValueError)
"""Memory strategies by `AgentConfig.memory` name: classes built with the `AgentConfig`
(`arborl.agent.memory`), imported on first use; `make_memory` builds one per episode."""
MEMORIES.register("full", "arborl.agent.memory:FullMemory")
MEMORIES.register("last_k", "arborl.agent.memory:LastKMemory")
MEMORIES.register("summary", "arborl.agent.memory:SummaryMemory")
ACTION_FORMATS: Registry = Registry("agent.action_format")
"""Action formats by name: `arborl.agent.parsing.ActionFormat`s (a parser and the stop
strings), imported on first use. `arborl.curate` reads data with the same formats."""
ACTION_FORMATS.register("plain", "arborl.agent.parsing:PLAIN")
ACTION_FORMATS.register("react", "arborl.agent.parsing:REACT")
ACTION_FORMATS.register("react_text", "arborl.agent.parsing:REACT_TEXT")
FORMAT_ERROR_ACTIONS = ("raw", "empty")
INSTRUCTION_ROLES = ("user", "system")


@dataclass(frozen=True)
class ActionMode:
    """How an LM policy picks each action (`agent.action_mode`), and what that needs and
    supports: the config and the engines ask these, never the mode's name."""

    name: str
    """The mode's one name, in configs, docs and `ACTION_MODES`."""
    policy: str
    """`"module:Class"` of its policy, built as `cls(backend, tokenizer, rollout_cfg,
    agent_cfg, name=...)` (`arborl.rollout.make_lm_policy`), imported on first use."""
    needs_local_model: bool = False
    """It runs the policy's own forward pass (an engine that only generates, such as vLLM,
    cannot serve it)."""
    needs_available_actions: bool = False
    """It chooses among the env's `info["available_actions"]` (checked when the first
    episode starts: an env's action list is known only then)."""
    supports_tree: bool = False
    """Search trees can grow with it (`rollout.mode=tree`: their proposers generate)."""
    supports_programs: bool = False
    """An agent program's model calls can run in it (`rollout.mode=agent`: the gateway
    generates)."""

    def capabilities(self) -> frozenset[str]:
        """The names of the capability fields this mode declares true."""
        return frozenset(k for k, v in asdict(self).items() if v is True)

    def policy_class(self) -> type:
        return load_entry_point(self.policy, f"agent.action_mode={self.name!r} policy")


ACTION_MODES: Registry[ActionMode] = Registry(
    "agent.action_mode", entry_point_group="arborl.action_modes", error=ValueError
)
"""`agent.action_mode` -> `ActionMode` (or a `"module:attr"` naming one)."""
ACTION_MODES.register(
    "generate",
    ActionMode(
        "generate", "arborl.rollout.policies:LMPolicy", supports_tree=True, supports_programs=True
    ),
)
ACTION_MODES.register(
    "score",
    ActionMode(
        "score",
        "arborl.rollout.action_scoring:ScoringPolicy",
        needs_local_model=True,
        needs_available_actions=True,
    ),
)
SCORE_NORMS = ("sum", "token", "word")


@dataclass
class AgentConfig:
    """Prompt construction, memory and action parsing for one agent."""

    memory: str = "full"
    """Which past turns the `step`-view prompt shows: "full" (all), "last_k" (the last
    `memory_k`), or "summary" (a running text summary instead of past turns); a name of
    `MEMORIES`. The
    `episode` view always keeps the full token sequence and requires "full"."""
    memory_k: int = 4
    """Number of past turns shown by `memory="last_k"`."""
    summary_fn: Callable[..., str] | str | None = None
    """Summary hook for `memory="summary"`: a callable or a "module:function" string with
    signature `(previous_summary, observation, response, turn) -> str`. None uses the
    deterministic rule-based summary ("turns so far: N; last observation: ...")."""
    action_format: str = "plain"
    """"plain": the whole response (up to the end-of-turn token) is the action, the default
    for tiny char models; "react": `<think>...</think><action>...</action>`; "react_text":
    the action is on an `Action: ...` line (a name of `ACTION_FORMATS`)."""
    think_tag: str = "think"
    """Tag name of the reasoning block in the "react" format."""
    action_tag: str = "action"
    """Tag name of the action block in the "react" format."""
    require_thought: bool = False
    """In the "react" format, a response without a closed think block is not format-ok."""
    on_format_error: str = "raw"
    """Action sent to the env when the response is malformed: "raw" (the stripped response
    text, which the env then judges) or "empty" (the empty string, always invalid)."""
    max_obs_chars: int | None = None
    """Keep only the first this many characters of each observation (None: no limit)."""
    system_prompt: str | None = None
    """Instruction text shown to the agent; None uses the env's `instruction`."""
    include_instruction: bool = True
    """Show the instruction at all (tiny models trained without it turn this off)."""
    repeat_instruction: bool = False
    """Show the instruction in every user message, not only the first one of the prompt."""
    instruction_role: str = "user"
    """"user": prefix the instruction to the first user message; "system": put it in a
    system message (for chat templates that support one)."""
    action_mode: str = "generate"
    """How the LM picks an action (a name of `ACTION_MODES`): "generate" samples a free-text
    response and parses it; "score" (GLAM/TWOSOME) scores each of the env's
    `info["available_actions"]` by the log-probability of its response tokens after the
    same prompt, and samples from the softmax over the candidates at the rollout
    temperature, so no action is ever invalid and the PPO ratio, entropy and KL are those
    of that categorical. Needs an env that lists its actions, the `step` view and a local
    model (not vLLM or an HTTP endpoint)."""
    score_norm: str = "word"
    """With `action_mode="score"`: how a candidate's summed token log-probability is
    normalised before the softmax: "sum" (as is: at temperature 1 the policy is then free
    generation restricted to the valid actions, which favours short ones), "token"
    (divided by its number of tokens, the end-of-turn token included) or "word" (divided
    by its number of whitespace-separated words; TWOSOME's shipped setting)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, prefix: str = "agent") -> None:
        """Raise `ValueError` naming the field, the value and what is allowed."""
        choices: dict[str, tuple[Any, tuple[str, ...]]] = {
            "memory": (self.memory, MEMORIES),
            "action_format": (self.action_format, ACTION_FORMATS),
            "on_format_error": (self.on_format_error, FORMAT_ERROR_ACTIONS),
            "instruction_role": (self.instruction_role, INSTRUCTION_ROLES),
            "action_mode": (self.action_mode, ACTION_MODES),
            "score_norm": (self.score_norm, SCORE_NORMS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ValueError(f"{prefix}.{name}={value!r} is not one of {list(allowed)}")
        if not isinstance(self.memory_k, int) or self.memory_k < 0:
            raise ValueError(f"{prefix}.memory_k={self.memory_k!r} must be an int >= 0")
        if self.max_obs_chars is not None and self.max_obs_chars < 1:
            raise ValueError(
                f"{prefix}.max_obs_chars={self.max_obs_chars!r} must be >= 1 or None (no limit)"
            )
        for name in ("think_tag", "action_tag"):
            tag = getattr(self, name)
            if not isinstance(tag, str) or not tag or any(c in tag for c in "<>/ "):
                raise ValueError(
                    f"{prefix}.{name}={tag!r} must be a bare tag name such as 'action' "
                    "(no angle brackets, slashes or spaces)"
                )
        if self.summary_fn is not None and not (
            callable(self.summary_fn)
            or (isinstance(self.summary_fn, str) and ":" in self.summary_fn)
        ):
            raise ValueError(
                f"{prefix}.summary_fn={self.summary_fn!r} must be a callable or a "
                "'module:function' string"
            )
