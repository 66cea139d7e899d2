"""Adapters for chat-formatted datasets: VLM-R1 ``conversations``, TRL ``prompt``, ms-swift ``messages``.

The question is the last user turn's text (media placeholders removed); the answer is the
dataset's answer column, or else the reference assistant turn.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from data_recipes.adapters.base import (
    BadRow,
    Row,
    answer_value,
    field,
    first_field,
    one_or_many,
    register_adapter,
    strip_media_tokens,
)

ANSWER_COLUMNS = ("solution", "answer", "ground_truth")


def message_text(content: Any) -> str:
    """Text of a message's content: a string, or the text parts of an HF content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(part.get("text") or "" for part in content if isinstance(part, Mapping))
    return ""


def last_turn(messages: Any, roles: Sequence[str], role_key: str, text_key: str) -> str:
    """Text of the last message whose role is in ``roles``; none is a ``BadRow``."""
    messages = messages if isinstance(messages, list) else []
    turns = [m for m in messages if isinstance(m, Mapping) and m.get(role_key) in roles]
    if not turns:
        raise BadRow("missing field", f"a {'/'.join(roles)} turn")
    return strip_media_tokens(message_text(turns[-1].get(text_key)))


def media_columns(raw: Mapping[str, Any]) -> Row:
    """The row's image references: ``images`` (a list) or ``image`` (one, or a list); none for text-only rows."""
    if raw.get("images") is not None:
        return {"images": list(raw["images"])}
    if raw.get("image") is not None:
        return one_or_many(raw["image"], "image")
    return {}


def answer_or_reply(
    raw: Mapping[str, Any], messages: Any, role_key: str, text_key: str, reply_roles: Sequence[str]
) -> Any:
    """The answer column if any, else the last assistant reply in ``messages``."""
    if any(raw.get(name) is not None for name in ANSWER_COLUMNS):
        return answer_value(first_field(raw, ANSWER_COLUMNS))
    return answer_value(last_turn(messages, reply_roles, role_key, text_key))


@register_adapter("vlm_r1", columns=("conversations",), optional=("image", *ANSWER_COLUMNS, "accu_reward_method"))
def vlm_r1(raw: Mapping[str, Any]) -> Row:
    """VLM-R1 jsonl: ``image`` (path or list), ``conversations`` [{from: human|gpt, value}], maybe ``solution``."""
    conversations = field(raw, "conversations")
    problem = last_turn(conversations, ("human", "user"), "from", "value")
    answer = answer_or_reply(raw, conversations, "from", "value", ("gpt", "assistant"))
    return {"problem": problem, "answer": answer, **one_or_many(field(raw, "image"), "image")}


@register_adapter("trl", columns=("prompt",), optional=("image", "images", "completion", *ANSWER_COLUMNS))
def trl(raw: Mapping[str, Any]) -> Row:
    """TRL conversational: ``prompt`` chat messages, ``image``/``images``, an answer column (e.g. ``solution``)."""
    prompt = field(raw, "prompt")
    problem = prompt if isinstance(prompt, str) else last_turn(prompt, ("user",), "role", "content")
    return {"problem": problem, "answer": answer_value(first_field(raw, ANSWER_COLUMNS)), **media_columns(raw)}


@register_adapter("swift", columns=("messages",), optional=("image", "images", *ANSWER_COLUMNS))
def swift(raw: Mapping[str, Any]) -> Row:
    """ms-swift: ``messages`` [{role, content with <image>}], ``images``, ``solution`` (else the assistant turn)."""
    messages = field(raw, "messages")
    problem = last_turn(messages, ("user",), "role", "content")
    answer = answer_or_reply(raw, messages, "role", "content", ("assistant",))
    return {"problem": problem, "answer": answer, **media_columns(raw)}
