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
) -> str:
    """Build a template rendering string or multi-part message contents.

    ``media_markup`` maps a part type ("image", "video", "audio") to the text that
    stands for it; ``turn_open`` is a Jinja expression (it may use ``message``);
    ``default_system`` is inserted when the conversation has no system turn.
    """
    media = "".join(
        f"{{%- elif part['type'] == {kind!r} -%}}{{{{ {markup!r} }}}}" for kind, markup in media_markup.items()
    )
    system = (
        f"{{%- if messages[0]['role'] != 'system' -%}}"
        f"{{{{ {_open_for('system', turn_open)} + {default_system!r} + {turn_close!r} }}}}"
        f"{{%- endif -%}}"
        if default_system is not None
        else ""
    )
    return (
        system
        + "{%- for message in messages -%}"
        + f"{{{{ {turn_open} }}}}"
        + "{%- if message['content'] is string -%}{{ message['content'] }}"
        + "{%- else -%}{%- for part in message['content'] -%}"
        + "{%- if part['type'] == 'text' -%}{{ part['text'] }}"
        + media
        + "{%- endif -%}{%- endfor -%}{%- endif -%}"
        + f"{{{{ {turn_close!r} }}}}"
        + "{%- endfor -%}"
        + f"{{%- if add_generation_prompt -%}}{{{{ {generation_prompt!r} }}}}{{%- endif -%}}"
    )


def _open_for(role: str, turn_open: str) -> str:
    """``turn_open`` rendered for a fixed role outside the message loop."""
    return "(" + turn_open.replace("message['role']", repr(role)) + ")"
