"""The ``Task`` base class: a canonical dataset row -> a chat prompt, a ground truth, rewards, a metric.

A row (see docs/DEVELOPING.md) is a dict with ``id``, ``problem``, ``answer`` and media
columns ``image`` / ``images`` / ``video`` / ``videos`` / ``audio`` / ``audios`` holding
references (absolute paths after loading). A task subclass says how to read its ground
truth (:meth:`Task.ground_truth`), which task fields its rewards need
(:meth:`Task.task_fields`), how to parse a model answer (:meth:`Task.parse`), its reward
weights and which reward is its eval metric.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Sequence

from mmgrpo.types import Message, Sample
from processors.budgets import ImageBudget, VideoBudget
from tasks.guards import Guards, guarded_answer, single_answer
from tasks.registry import REWARDS
from tasks.scoring import reward_fields
from tasks.steps import STEP_RULES

MEDIA_KINDS = ("image", "video", "audio")

THINK_INSTRUCTION = (
    "First think about the question step by step inside <think> </think> tags, "
    "then give the final answer inside <answer> </answer> tags."
)
ANSWER_INSTRUCTION = "Give only the final answer inside <answer> </answer> tags."


class RowError(ValueError):
    """A dataset row cannot become a sample; the message names the row and the field."""

    def __init__(self, row: Mapping[str, Any], field: str, reason: str) -> None:
        self.row_id, self.field, self.reason = row.get("id", "<no id>"), field, reason
        super().__init__(f"row {self.row_id!r}, field {field!r}: {reason}")


@dataclass(frozen=True)
class ModelInfo:
    """What a task knows of the model its prompts go to (filled in from the model config)."""

    family: str | None = None
    """The model's ``model_type`` (``qwen2_5_vl``, ``qwen2_vl``, ...); None when unknown."""
    image_budget: ImageBudget = ImageBudget()
    """The budget the batch builder resizes images into, so a task sees the sizes the model sees."""
    video_budget: VideoBudget = VideoBudget()
    """The budget clips are sampled under, so a benchmark knows which frames the model sees (Video-MME's subtitles)."""


def require(row: Mapping[str, Any], field: str) -> Any:
    """``row[field]``, or a :class:`RowError` if it is missing or None."""
    if row.get(field) is None:
        raise RowError(row, field, "missing")
    return row[field]


def function_schemas(value: Any) -> list[dict[str, Any]]:
    """A row's ``tools``: a list (or its JSON text) of function schemas, ``{"type": "function", "function": {"name",
    ...}}`` as chat templates take them, or the bare ``{"name", "description", "parameters"}`` many datasets hold
    (wrapped); raises ValueError saying what is wrong."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"not JSON: {error}") from None
    if not isinstance(value, list):
        raise ValueError(f"must be a list of function schemas, got {type(value).__name__}")
    schemas = []
    for index, schema in enumerate(value):
        if isinstance(schema, dict) and "type" not in schema and "function" not in schema:
            schema = {"type": "function", "function": schema}
        function = schema.get("function") if isinstance(schema, dict) else None
        if not (isinstance(schema, dict) and schema.get("type") == "function" and isinstance(function, dict)
                and isinstance(function.get("name"), str)):
            raise ValueError(f'item {index} is not a function schema {{"name": ..., "parameters": ...}}')
        schemas.append(schema)
    return schemas


def media_parts(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Chat content parts for every media reference in ``row`` (singular and plural columns)."""
    parts = []
    for kind in MEDIA_KINDS:
        for column in (kind, f"{kind}s"):
            value = row.get(column)
            refs = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
            parts.extend({"type": kind, kind: ref} for ref in refs)
    return parts


class Task:
    """Base class of a task; subclasses are registered with ``@register_task("name")``."""

    name: ClassVar[str] = ""
    default_rewards: ClassVar[dict[str, float]] = {}  # reward name -> weight
    metric_reward: ClassVar[str] = ""  # the registered reward whose value is the eval metric
    guarded_rewards: ClassVar[tuple[str, ...]] = ()  # rewards taking a ``guards`` option
    required_media: ClassVar[str | None] = None  # a media kind every row must have
    reward_bounds: ClassVar[dict[str, tuple[float, float]]] = {}  # a reward's value range when not [-1, 1]
    default_reasoning: ClassVar[str] = "I look at the input carefully and work out the answer."

    def __init__(
        self,
        *,
        model: ModelInfo = ModelInfo(),
        guards: Guards | Mapping[str, Any] | bool | None = None,
        think_instruction: str = THINK_INSTRUCTION,
        answer_instruction: str = ANSWER_INSTRUCTION,
        step_rule: str = "lines",
    ) -> None:
        """``step_rule`` (:mod:`tasks.steps`) places a process reward's per-step scores on the completion."""
        STEP_RULES.get(step_rule)  # an unknown rule fails here, naming the known ones
        self.model = model
        self.guards = Guards.coerce(guards)
        self.think_instruction = think_instruction
        self.answer_instruction = answer_instruction
        self.step_rule = step_rule

    @classmethod
    def option_names(cls) -> set[str]:
        """The keyword options the task's constructor takes (its own and its base classes')."""
        names: set[str] = set()
        for klass in cls.__mro__:
            if "__init__" in vars(klass) and issubclass(klass, Task):
                parameters = inspect.signature(klass.__init__).parameters.values()
                names.update(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)
        return names

    # -- what subclasses override -------------------------------------------------
    def ground_truth(self, row: Mapping[str, Any]) -> Any:
        """The row's ground truth in the form this task's rewards compare against.

        A solution written with answer tags (R1-style data) must hold exactly one: its
        content is the ground truth; several or unclosed tags make the row ambiguous.
        """
        answer = require(row, "answer")
        if not isinstance(answer, str):
            return answer
        try:
            return single_answer(answer)
        except ValueError as error:
            raise RowError(row, "answer", str(error)) from None

    def task_fields(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Task-specific fields the rewards need (they go into ``Sample.extra``)."""
        return {}

    def question(self, row: Mapping[str, Any]) -> str:
        """The question text shown to the model (before the format instruction)."""
        return str(require(row, "problem"))

    def parse(self, answer_text: str) -> Any:
        """This task's reading of an answer text (None if it cannot be read)."""
        return answer_text.strip()

    def format_answer(self, sample: Sample) -> str:
        """The ground truth written as this task's answer text (what the answer tag should hold)."""
        return str(sample.answer)

    def reference_completion(self, sample: Sample) -> str:
        """A completion that earns full reward, the cold-start SFT target for ``sample``.

        With a think prompt the reasoning is the row's ``reasoning`` field when the dataset
        has one (R1-style cold-start data), else a short generic note.
        """
        answer = f"<answer>{self.format_answer(sample)}</answer>"
        if sample.extra.get("think") is False:
            return answer
        reasoning = sample.extra.get("reasoning") or self.default_reasoning
        return f"<think>{reasoning}</think>{answer}"

    def reference_turns(self, sample: Sample) -> list[str]:
        """The cold-start SFT target as the policy's turns: one (:meth:`reference_completion`), or, for a task that
        demonstrates tool use, a turn ending in a tool call and then the turns after its result (the tools run
        between them in SFT as in rollouts)."""
        return [self.reference_completion(sample)]

    def reward_options(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """Keyword options (e.g. the guards) for the rewards in ``names`` (default: the task's
        rewards) that take any, in the form ``score_completions(reward_options=...)`` takes."""
        names = set(self.default_rewards if names is None else names)
        return {name: {"guards": self.guards} for name in self.guarded_rewards if name in names}

    # -- shared behaviour -----------------------------------------------------------
    def to_sample(
        self, row: Mapping[str, Any], *, think: bool = True, system_prompt: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
    ) -> Sample:
        """The chat prompt for ``row``: media parts, then the question and the format instruction; ``tools``, the
        schemas the chat template renders into it (the run's tools, when it offers any and renders their schemas),
        replaced by the row's own ``tools`` field where it has one; without ``tools`` that field is not read."""
        parts = media_parts(row)
        if self.required_media and not any(part["type"] == self.required_media for part in parts):
            raise RowError(row, self.required_media, f"task {self.name!r} needs a {self.required_media}")
        instruction = self.think_instruction if think else self.answer_instruction
        text = f"{self.question(row)}\n{instruction}"
        messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": "user", "content": [*parts, {"type": "text", "text": text}]})
        extra = {"problem": str(require(row, "problem")), "think": think, **self.task_fields(row)}
        if row.get("reasoning"):  # a worked solution (e.g. GSM8K's): the SFT target's think part
            extra["reasoning"] = str(row["reasoning"])
        sample_id, answer = str(require(row, "id")), self.ground_truth(row)
        try:
            schemas = function_schemas(row["tools"]) if tools and row.get("tools") is not None else list(tools)
        except ValueError as error:
            raise RowError(row, "tools", str(error)) from None
        return Sample(id=sample_id, task=self.name, messages=messages, answer=answer, extra=extra, tools=schemas)

    def metric(self, completion: str, sample: Sample) -> float:
        """Eval score of one completion: the ``metric_reward`` on it, with the task's options."""
        options = self.reward_options([self.metric_reward]).get(self.metric_reward, {})
        value = REWARDS.get(self.metric_reward)([completion], **reward_fields([sample]), **options)[0]
        return 0.0 if value is None else float(value)

    def parse_answer(self, completion: str) -> Any:
        """What the completion answered, read leniently (no guards), for reports; None if nothing."""
        text = guarded_answer(completion, guards=Guards.off()).text
        return None if text is None else self.parse(text)
