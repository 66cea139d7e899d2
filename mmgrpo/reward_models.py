"""Models as rewards: a trained reward model (sequence classifier) or a generative judge.

Each entry of ``task.reward_models`` becomes a reward registered under its ``name``, weighted
in ``task.rewards`` like any other and called through the same pool, timeout and error policy
(:mod:`tasks.reward_calls`). Registering is light (no torch import: the config check stays fast);
the model loads on first use, once per process, on its own
``device`` and ``dtype``, in eval mode with ``requires_grad`` off, and runs under
``torch.no_grad()``: it never receives gradients and is not in the optimizer.

- ``classifier``: ``AutoModelForSequenceClassification`` scores the chat ``[user: problem,
  assistant: completion]`` (the tokenizer's chat template, or the two texts on two lines when
  it has none), ``batch_size`` at a time, cut to the last ``max_length`` tokens. The score is
  the single logit, or the probability of ``label`` (default the last) when it has several.
  A VLM-based classifier (a supported VLM checkpoint with ``value_head.safetensors``, see
  :mod:`mmgrpo.models.value_head`) scores the same chat with the sample's media in the user
  turn, encoded by the policy's media pipeline; a conversation with bad media or longer than
  ``max_length`` (media tokens cannot be cut) scores NaN, a counted reward error.
- ``judge``: a causal LM is asked ``rubric`` (``{problem}``, ``{completion}``,
  ``{answer}`` filled in) and answers greedily; the first number of its reply divided by
  ``max_score`` (clamped to 0-1) is the score. A reply without a number scores NaN, which the
  reward policy reports as that completion's error (``reward_errors.jsonl``). A multimodal
  judge (a VLM checkpoint: a vision or audio tower in its config) is shown the sample's media
  before the rubric, through the HF rollout engine (the policy's media pipeline and budgets);
  a text one (``AutoModelForCausalLM``) reads the rubric alone.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tasks.registry import REWARDS

if TYPE_CHECKING:
    from mmgrpo.config.schema import RewardModelConfig

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def judge_score(reply: str, max_score: float) -> float:
    """The first number of ``reply`` on a 0-``max_score`` scale, as 0-1; NaN when there is none."""
    found = _NUMBER.search(reply)
    if found is None:
        return math.nan
    return min(max(float(found.group()) / max_score, 0.0), 1.0)


class RewardModel:
    """A reward function backed by a model; callable like any registered reward."""

    def __init__(self, config: RewardModelConfig) -> None:
        self.config = config
        self._loaded: tuple[Any, Any] | None = None
        self._engine: Any = None  # a VLM judge samples through the HF rollout engine (media budgets, bad media)
        self._value_head: Any = None  # a VLM classifier's score layer over its last hidden state
        self._lock = threading.Lock()

    def __call__(self, completions: Sequence[str], problem: Sequence[str | None] | None = None,
                 answer: Sequence[Any] | None = None, media: Sequence[list[dict]] | None = None, **_) -> list[float]:
        import torch

        problems = [p or "" for p in problem] if problem is not None else [""] * len(completions)
        answers = list(answer) if answer is not None else [""] * len(completions)
        shown = list(media) if media is not None else [[] for _ in completions]
        model, tokenizer = self.load()
        size, scores = self.config.batch_size, []
        with self._lock, torch.no_grad():  # one batch at a time on the model, whichever thread calls
            for start in range(0, len(completions), size):
                part = slice(start, start + size)
                if self._value_head is not None:
                    scores += self._classify_with_media(model, tokenizer, completions[part], problems[part], shown[part])
                elif self.config.kind == "classifier":
                    scores += self._classify(model, tokenizer, completions[part], problems[part])
                elif self._engine is not None:
                    scores += self._judge_with_media(completions[part], problems[part], answers[part], shown[part])
                else:
                    scores += self._judge(model, tokenizer, completions[part], problems[part], answers[part])
        return scores

    def load(self) -> tuple[Any, Any]:
        """(model, tokenizer), loaded once: frozen, eval mode, on the configured device and dtype."""
        with self._lock:
            if self._loaded is None and _sees_media(self.config.path):
                self._load_vlm()
            if self._loaded is None:
                import torch
                from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

                auto = AutoModelForSequenceClassification if self.config.kind == "classifier" else AutoModelForCausalLM
                model, loading = auto.from_pretrained(self.config.path, dtype=getattr(torch, self.config.dtype),
                                                      output_loading_info=True)
                if loading["missing_keys"]:  # transformers would score with freshly initialised weights
                    raise ValueError(
                        f"task.reward_models {self.config.name!r}: {self.config.path} has no weights for "
                        f"{sorted(loading['missing_keys'])[:4]} of {type(model).__name__}: not a trained "
                        f"{self.config.kind} (a causal LM is a judge; a VLM classifier needs value_head.safetensors)"
                    )
                model.to(self.config.device).eval().requires_grad_(False)
                tokenizer = AutoTokenizer.from_pretrained(self.config.path)
                tokenizer.truncation_side = "left"  # keep the end of the completion
                if tokenizer.pad_token is None:
                    tokenizer.pad_token = tokenizer.eos_token
                self._loaded = (model, tokenizer)
            return self._loaded

    def _rubric_questions(self, completions: Sequence[str], problems: Sequence[str],
                          answers: Sequence[Any]) -> list[str]:
        return [self.config.rubric.format(problem=problem, completion=completion, answer=answer)
                for completion, problem, answer in zip(completions, problems, answers)]

    def _load_vlm(self) -> None:
        """A VLM checkpoint through the policy's loader: a judge gets an engine, a classifier its value head."""
        import torch

        from mmgrpo.models.loading import load_model_and_processor
        from mmgrpo.models.value_head import load_value_head
        from mmgrpo.rollout.hf import HFEngine

        model, processor = load_model_and_processor(self.config.path, dtype=self.config.dtype,
                                                    device=self.config.device)
        model.eval().requires_grad_(False)
        if self.config.kind == "judge":
            self._engine = HFEngine(model, processor, max_prompt_len=self.config.max_length)
        else:
            hidden_size = model.config.get_text_config().hidden_size
            self._value_head = load_value_head(self.config.path, hidden_size, dtype=getattr(torch, self.config.dtype),
                                               device=self.config.device)
        self._loaded = (model, processor)

    def _judge_with_media(self, completions: Sequence[str], problems: Sequence[str], answers: Sequence[Any],
                          media: Sequence[list[dict]]) -> list[float]:
        """The rubric with each sample's images/videos/audio before it, through the rollout engine, greedy."""
        from mmgrpo.rollout.base import SamplingParams

        questions = self._rubric_questions(completions, problems, answers)
        samples = _media_chats(media, questions)
        groups = self._engine.generate(samples, SamplingParams(n=1, temperature=0.0,
                                                               max_new_tokens=self.config.max_new_tokens))
        return [judge_score(group[0].text, self.config.max_score) if group else math.nan for group in groups]

    def _classify(self, model: Any, tokenizer: Any, completions: Sequence[str], problems: Sequence[str]) -> list[float]:
        texts = [_chat(tokenizer, problem, completion) for problem, completion in zip(problems, completions)]
        tokenizer.padding_side = "right"
        inputs = tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                           max_length=self.config.max_length).to(self.config.device)
        return self._scores(model(**inputs).logits)

    def _classify_with_media(self, model: Any, processor: Any, completions: Sequence[str], problems: Sequence[str],
                             media: Sequence[list[dict]]) -> list[float]:
        """The value head over each ``[user: media + problem, assistant: completion]`` chat's last token."""
        from mmgrpo.models.batch import build_prompt_batch
        from mmgrpo.models.value_head import last_token_scores

        batch = build_prompt_batch(processor, _media_chats(media, problems, completions), family=model.config.model_type,
                                   max_prompt_len=self.config.max_length)
        scores = [math.nan] * len(completions)  # rows left out (bad media, too long) get no verdict
        if len(batch):
            for row, score in zip(batch.kept, self._scores(last_token_scores(model, self._value_head,
                                                                              batch.to(self.config.device)))):
                scores[row] = score
        return scores

    def _scores(self, logits: Any) -> list[float]:
        """``[B, labels]`` logits as scores: the single logit, or the probability of the configured label."""
        logits = logits.float()
        if logits.shape[-1] == 1:
            return logits[:, 0].tolist()
        label = logits.shape[-1] - 1 if self.config.label is None else self.config.label
        return logits.softmax(-1)[:, label].tolist()

    def ask(self, questions: Sequence[str]) -> list[str]:
        """A text judge's greedy replies to ``questions`` (no rubric, no score): what eval's answer
        extraction asks (``eval.judge``). A multimodal judge is refused: extraction reads text only."""
        import torch

        model, tokenizer = self.load()
        if self.config.kind != "judge" or self._engine is not None:
            raise ValueError(f"{self.config.name!r}: answer extraction needs a text judge (kind judge, a causal LM)")
        size, replies = self.config.batch_size, []
        with self._lock, torch.no_grad():
            for start in range(0, len(questions), size):
                replies += self._replies(model, tokenizer, questions[start:start + size])
        return replies

    def _judge(self, model: Any, tokenizer: Any, completions: Sequence[str], problems: Sequence[str],
               answers: Sequence[Any]) -> list[float]:
        replies = self._replies(model, tokenizer, self._rubric_questions(completions, problems, answers))
        return [judge_score(reply, self.config.max_score) for reply in replies]

    def _replies(self, model: Any, tokenizer: Any, questions: Sequence[str]) -> list[str]:
        texts = [_chat(tokenizer, question, None) for question in questions]
        tokenizer.padding_side = "left"  # generation continues every row from its end
        inputs = tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                           max_length=self.config.max_length).to(self.config.device)
        generated = model.generate(**inputs, max_new_tokens=self.config.max_new_tokens, do_sample=False,
                                   pad_token_id=tokenizer.pad_token_id)
        return tokenizer.batch_decode(generated[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def _sees_media(path: str) -> bool:
    """Whether the checkpoint at ``path`` is a multimodal model (a vision or audio tower in its config)."""
    from transformers import AutoConfig

    from mmgrpo.models.value_head import MEDIA_TOWERS

    config = AutoConfig.from_pretrained(path)
    return any(hasattr(config, key) for key in MEDIA_TOWERS)


def _media_chats(media: Sequence[list[dict]], questions: Sequence[str],
                 replies: Sequence[str] | None = None) -> list[Any]:
    """One sample per row: the user turn shows the row's media then its question; with ``replies``, the
    assistant's reply closes the conversation (a whole exchange to score)."""
    from mmgrpo.types import Sample

    samples = []
    for index, (parts, question) in enumerate(zip(media, questions)):
        messages = [{"role": "user", "content": [*parts, {"type": "text", "text": question}]}]
        if replies is not None:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": replies[index]}]})
        samples.append(Sample(id=str(index), task="reward_model", messages=messages))
    return samples


def _chat(tokenizer: Any, user: str, assistant: str | None) -> str:
    """``user`` (and ``assistant``'s reply) in the tokenizer's chat format; plain lines without a template."""
    if not getattr(tokenizer, "chat_template", None):
        return user if assistant is None else f"{user}\n{assistant}"
    messages = [{"role": "user", "content": user}]
    if assistant is not None:
        messages.append({"role": "assistant", "content": assistant})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=assistant is None)


def register_reward_models(configs: Iterable[RewardModelConfig]) -> list[str]:
    """Register each model as a reward under its name (cheap: models load on first call).

    Registering the same config again is a no-op; a name taken by another reward is an error.
    """
    names = []
    for config in configs:
        if not config.name or not config.path:
            raise ValueError(f"task.reward_models: every entry needs a name and a path, got {config}")
        if config.name in REWARDS:
            registered = REWARDS.get(config.name)
            if not (isinstance(registered, RewardModel) and registered.config == config):
                raise ValueError(f"task.reward_models: {config.name!r} is already a reward; choose another name")
        else:
            REWARDS.add(config.name, RewardModel(config))
        names.append(config.name)
    return names
