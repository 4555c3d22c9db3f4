"""`AgentProgramConfig`: the `agent_program` section, an agent you wrote, trained as it is.

With `rollout.mode=program` each episode runs this program against the training gateway
(`arborl.generation.gateway`) instead of arborl's own prompt loop: it gets a task, a
`base_url` and an API key, talks to the policy through any OpenAI client or agent library,
and returns a reward (docs/agents.md). Its own section, like `search`, so that the rollout
section only says *whether* episodes come from an agent program.

    arborl train rollout.mode=program agent_program.fn=my_agent:run env.id=arborl/ToolQA-v0
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class AgentProgramConfig:
    """An agent program that talks to the policy over the OpenAI API (`rollout.mode=program`)."""

    fn: str | None = None
    """`"package.module:function"`, called once per episode as `fn(task, base_url,
    api_key)` (a plain or an `async` function). It returns the episode's reward (a number
    or bool), an answer (a str, graded by the env: `env.step(answer)`), a dict with
    `reward` or `answer`, or None (then `reward` must score the episode)."""
    command: str | None = None
    """A command line run once per episode instead of `fn` (split like a shell would, no
    shell): it gets `ARBORL_TASK` (the task as JSON), `OPENAI_BASE_URL` and
    `OPENAI_API_KEY` in its environment and prints its result as the last line of stdout:
    a JSON number (the reward), a JSON string (an answer) or an object as `fn` returns."""
    reward: str | None = None
    """`"package.module:function"` scoring every episode as `reward(task, result, calls)
    -> float` (`result`: what the program returned; `calls`: the gateway's records of the
    episode, `arborl.generation.calls.CallRecord`s). None: the program's own reward (or the env's grade of its answer)."""
    process: bool = False
    """Run `fn` in its own process (`python -m arborl.rollout.fn_agent fn`, as a
    `command`), so that the deadline kills it whole, children included, whatever it does:
    for code that may block (sync clients, tools) or ignore a cancel. It then must return
    JSON (a number, str, dict or None). False: `fn` runs in a thread of the trainer."""
    max_concurrent: int = 8
    """Episodes run at once (each in its own thread, or process for `command`); their
    calls take the model in turn."""
    timeout_s: float = 120.0
    """Seconds an episode may run; the trainer stops waiting at it, whatever the program
    does. Past it the episode ends as an error (not trained on, counted in
    rollout/env_errors) and its session is closed, so its later calls get 410; a command's
    (or `process` fn's) process group is killed, an `async` fn is cancelled, and a fn in a
    thread that ignores the cancel or blocks is left to finish on its own (Python cannot
    stop a thread). A command's group is killed when its main process exits, too."""
    max_calls: int = 64
    """Model calls one episode may make; past it the gateway answers 429."""
    win_reward: float = 1.0
    """An episode whose reward is at least this counts as a success (train/success, the
    held-out evaluation), unless the env graded an answer (then the env's `won`)."""
    tool_parser: str = "hermes"
    """How generated tool calls are read, a name of `arborl.generation.tools.TOOL_PARSERS`
    (checked when the gateway starts)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, prefix: str = "agent_program") -> None:
        """Raise `ValueError` naming the field, the value and what is allowed."""
        from arborl.registry import is_entry_point

        for name in ("fn", "reward"):
            value = getattr(self, name)
            if value is not None and not is_entry_point(value):
                raise ValueError(f"{prefix}.{name}={value!r} must be 'package.module:function'")
        if self.fn and self.command:
            raise ValueError(f"{prefix}.fn and {prefix}.command are both set; give one")
        if self.process and not self.fn:
            raise ValueError(
                f"{prefix}.process=true runs {prefix}.fn in a process; set fn "
                "(a command runs in its own process already)"
            )
        if self.command is not None and not str(self.command).strip():
            raise ValueError(f"{prefix}.command is empty; give a command line or null")
        for name in ("max_concurrent", "max_calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{prefix}.{name}={value!r} must be an int >= 1")
        t = self.timeout_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t < math.inf:
            raise ValueError(f"{prefix}.timeout_s={t!r} must be a number of seconds > 0")
        w = self.win_reward
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w):
            raise ValueError(f"{prefix}.win_reward={w!r} must be a finite number")

    @property
    def given(self) -> bool:
        """Is there a program to run (`fn` or `command`)?"""
        return bool(self.fn or self.command)
