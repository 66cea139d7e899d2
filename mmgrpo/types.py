"""Core data types that flow between tasks, processors, rollout and the trainer.

Task-specific fields never leak into these types: they ride in ``Sample.extra`` and
reach the task's reward functions as keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# A chat message in the Hugging Face multimodal format, e.g.
# {"role": "user", "content": [{"type": "image", "image": "a.png"}, {"type": "text", "text": "..."}]}
Message = dict[str, Any]
# One scored step of a completion (process rewards): first character, one past the last, score.
Span = tuple[int, int, float]


@dataclass
class Sample:
    """One prompt: chat messages (with media references), its ground truth and task fields."""

    id: str
    task: str
    messages: list[Message]
    answer: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Schemas of the functions the policy may call (``{"type": "function", "function": {"name", "description",
    "parameters"}}``), rendered into the prompt by the model's chat template (``tools=``) where it has a tools block."""

    def user_text(self) -> str:
        """The text parts of the user turns, one per line (what the prompt asks, without its media)."""
        return "\n".join(
            part["text"] for message in self.messages if message.get("role") == "user"
            for part in (message["content"] if isinstance(message.get("content"), list) else [])
            if part.get("type") == "text"
        )

    def media(self, kind: str) -> list[Any]:
        """Media references of ``kind`` ("image", "video", "audio") in message order."""
        refs = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, list):
                refs.extend(part[kind] for part in content if part.get("type") == kind and kind in part)
        return refs


@dataclass(frozen=True, eq=False)  # equal when the same object: tensors have no single truth value
class InlineMedia:
    """Media inside a completion (the images tools returned mid-trajectory), encoded as a prompt's media are.

    The items come after the prompt's in the order of their placeholder tokens in the completion; the sampler's
    next turns and the trainer's forward both read the prompt's media followed by these
    (:mod:`mmgrpo.models.inline_media`)."""

    inputs: dict[str, torch.Tensor]
    """The family's media tensors of these items (``pixel_values``, ``image_grid_thw``, ...), on the CPU."""
    counts: dict[str, int]
    """Items by modality."""
    placeholder_tokens: dict[str, int]
    """Placeholder tokens the items take in the completion, by modality (what the media-token check expects)."""
    token_inputs: dict[str, torch.Tensor]
    """Per-token processor extras (``mm_token_type_ids``) of the completion's first tokens, ``[L]`` each; zero past
    them (the policy's own tokens)."""
    images: tuple[torch.Tensor, ...] = ()
    """The images as the policy saw them (after the budget's resize), ``[H, W, 3]`` uint8 each, for reports."""


@dataclass
class Completion:
    """One sampled continuation of a prompt; in a multi-turn rollout, the whole trajectory after the prompt: the
    policy's turns and, between them, the tool turns the rollout inserted (``observation_spans``)."""

    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None  # sampling-policy log-prob of each token, if the engine gives it
    truncated: bool = False  # hit max_new_tokens without EOS
    observation_spans: list[tuple[int, int]] = field(default_factory=list)
    """Token ranges ``[start, end)`` of ``token_ids`` that tools wrote, not the policy: no loss, KL, entropy or
    importance weight is taken on them, and lengths do not count them (their ``logprobs`` are placeholders)."""
    tool_outcomes: list[str] = field(default_factory=list)
    """How each tool call of the trajectory went (:data:`tasks.tools.OUTCOMES`), in order."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """The calls the rollout ran, in order (one per turn: its last): ``{"name", "arguments"}`` as written, or
    ``{"problem"}`` for one that could not be read."""
    turn_text_ends: list[int] = field(default_factory=list)
    """Where in ``text`` (the policy's turns, joined) each policy turn that a tool turn follows ends, in order."""
    media: InlineMedia | None = None
    """The media of the tool turns (a ``zoom_in`` crop), where the model family can take media mid-sequence."""

    @property
    def policy_token_count(self) -> int:
        """How many of the tokens the policy sampled."""
        return len(self.token_ids) - sum(end - start for start, end in self.observation_spans)
