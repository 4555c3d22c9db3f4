"""The agent layer: prompts from observations and memory, actions from completions."""

from arborl.agent.config import AgentConfig
from arborl.agent.memory import (
    MEMORIES,
    FullMemory,
    LastKMemory,
    Memory,
    MemoryView,
    SummaryMemory,
    make_memory,
    rule_based_summary,
)
from arborl.agent.parsing import ParsedAction, parse_action, stop_strings
from arborl.agent.prompt import (
    ChatContinuation,
    build_messages,
    build_prompt,
    encode_text,
    format_observation,
    instruction_text,
    render_chat,
    user_content,
)

__all__ = [
    "MEMORIES",
    "AgentConfig",
    "ChatContinuation",
    "FullMemory",
    "LastKMemory",
    "Memory",
    "MemoryView",
    "ParsedAction",
    "SummaryMemory",
    "build_messages",
    "build_prompt",
    "encode_text",
    "format_observation",
    "instruction_text",
    "make_memory",
    "parse_action",
    "render_chat",
    "rule_based_summary",
    "stop_strings",
    "user_content",
]
