"""Jinja chat templates for the tiny families, in each family's own turn format.

One generator covers them: a family differs only in how a turn opens and closes, how a
media part is marked up (the placeholder its processor expands), and whether a default
system prompt is inserted.
"""

from __future__ import annotations

from collections.abc import Mapping

CHATML_OPEN = "'<|im_start|>' + message['role'] + '\\n'"
CHATML_CLOSE = "<|im_end|>\n"
CHATML_GENERATION_PROMPT = "<|im_start|>assistant\n"


def chat_template(
    *,
    media_markup: Mapping[str, str],
    turn_open: str = CHATML_OPEN,
    turn_close: str = CHATML_CLOSE,
    generation_prompt: str = CHATML_GENERATION_PROMPT,
    default_system: str | None = None,
    renders_tools: bool = False,
    conversation_open: str = "",
) -> str:
    """Build a template rendering string or multi-part message contents.

    ``media_markup`` maps a part type ("image", "video", "audio") to the text that
    stands for it; ``turn_open`` is a Jinja expression (it may use ``message``);
    ``default_system`` is inserted when the conversation has no system turn; ``conversation_open`` is the text
    every conversation starts with (GLM's ``[gMASK]<sop>``).
    ``renders_tools``: given ``tools`` (function schemas), the system turn lists them and says how to call
    one (``<tool_call>{json}</tool_call>``), the system message's text first, as Qwen3's template does.
    """
    media = "".join(
        f"{{%- elif part['type'] == {kind!r} -%}}{{{{ {markup!r} }}}}" for kind, markup in media_markup.items()
    )
    no_tools_turn = " and not tools" if renders_tools else ""
    system = (
        f"{{%- if messages[0]['role'] != 'system'{no_tools_turn} -%}}"
        f"{{{{ {_open_for('system', turn_open)} + {default_system!r} + {turn_close!r} }}}}"
        f"{{%- endif -%}}"
        if default_system is not None
        else ""
    )
    if renders_tools:
        system = _tools_turn(_open_for("system", turn_open), turn_close) + system
    return (
        (f"{{{{ {conversation_open!r} }}}}" if conversation_open else "")
        + system
        + "{%- for message in messages -%}"
        + ("{%- if not (tools and loop.first and message['role'] == 'system') -%}" if renders_tools else "")
        + f"{{{{ {turn_open} }}}}"
        + "{%- if message['content'] is string -%}{{ message['content'] }}"
        + "{%- else -%}{%- for part in message['content'] -%}"
        + "{%- if part['type'] == 'text' -%}{{ part['text'] }}"
        + media
        + "{%- endif -%}{%- endfor -%}{%- endif -%}"
        + f"{{{{ {turn_close!r} }}}}"
        + ("{%- endif -%}" if renders_tools else "")
        + "{%- endfor -%}"
        + f"{{%- if add_generation_prompt -%}}{{{{ {generation_prompt!r} }}}}{{%- endif -%}}"
    )


def _open_for(role: str, turn_open: str) -> str:
    """``turn_open`` rendered for a fixed role outside the message loop."""
    return "(" + turn_open.replace("message['role']", repr(role)) + ")"


def _tools_turn(system_open: str, turn_close: str) -> str:
    """The system turn listing ``tools`` (one JSON schema a line) and the call format, after the system message."""
    return (
        "{%- if tools -%}"
        f"{{{{ {system_open} }}}}"
        "{%- if messages[0]['role'] == 'system' -%}"
        "{%- if messages[0]['content'] is string -%}{{ messages[0]['content'] }}"
        "{%- else -%}{%- for part in messages[0]['content'] if part['type'] == 'text' -%}{{ part['text'] }}"
        "{%- endfor -%}"
        "{%- endif -%}{{ '\\n\\n' }}{%- endif -%}"
        "{{ '# Tools\\n\\nFunctions you may call, as JSON schemas:\\n<tools>' }}"
        "{%- for tool in tools -%}{{ '\\n' + (tool | tojson) }}{%- endfor -%}"
        "{{ '\\n</tools>\\n\\nTo call one, write <tool_call>{\"name\": <name>, \"arguments\": <a JSON object>}"
        f"</tool_call>' + {turn_close!r} }}}}"
        "{%- endif -%}"
    )
