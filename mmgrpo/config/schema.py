"""The config tree: one dataclass per section, a help text per field.

The defaults ARE the embedded default run (``mmgrpo train`` with no arguments): a tiny
Qwen2.5-VL on generated counting images, on CPU. Numbers that differ for real models
say so in their help text, with the paper or project the value comes from.
Papers: GRPO = DeepSeekMath (Shao et al. 2024), DAPO (Yu et al. 2025),
Dr. GRPO = "Understanding R1-Zero-Like Training" (Liu et al. 2025).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from mmgrpo.config.backend_traits import BACKEND_TRAITS
from mmgrpo.config.coerce import build
from mmgrpo.config.algo_section import AlgoConfig
from mmgrpo.config.fields import option
from mmgrpo.config.vllm_section import VLLMConfig
from mmgrpo.config.run_sections import CheckpointConfig, EvalConfig, LogConfig
from mmgrpo.config.validation import validate_config


@dataclass
class ModelConfig:
    """Which model to train and the media budgets its processor gets."""

    name_or_path: str = option(
        "tiny:qwen2_5_vl",
        "Local path or Hugging Face Hub id of the policy (any AutoModelForImageTextToText). "
        "'tiny:<family>' builds a tiny random model of that family locally (mmgrpo.models).",
    )
    tiny_options: dict[str, Any] = option(
        {}, "Options for the tiny-model factory (hidden size, layers, ...); tiny: models only."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = option(
        "float32", "dtype the weights are loaded in; 'auto' uses the checkpoint's."
    )
    attn_implementation: str | None = option(
        None, "Attention kernel: eager, sdpa, flash_attention_2, ...; None = transformers' choice."
    )
    trust_remote_code: bool = option(
        False, "Run Python code shipped with the checkpoint. Off unless you trust the source."
    )
    min_pixels: int = option(
        56 * 56, "Fewest pixels per image after resizing (Qwen2-VL: 4 x 28 x 28 = 3136); min_pixels..max_pixels "
        "must lie within the checkpoint's image processor range, checked at load.", gt=0
    )
    max_pixels: int = option(
        112 * 112, "Most pixels per image after resizing. Tiny default; R1-V/EasyR1 use 401408 (512 x 28 x 28).", gt=0
    )
    fps: float = option(2.0, "Video frames sampled per second (qwen-vl-utils default 2.0).", gt=0)
    max_frames: int = option(16, "Most frames per video (qwen-vl-utils allows 768; small here for CPU).", ge=1)
    audio_sample_rate: int = option(
        16000, "Audio is resampled to this rate; must be the checkpoint's feature extractor's (Whisper: 16 kHz), "
        "checked at load.", gt=0
    )
    max_audio_seconds: float = option(30.0, "Longer audio is cut to this many seconds (one Whisper window).", gt=0)
    freeze_vision_tower: bool = option(
        False, "Train without the media encoder: the family's vision tower (Qwen2-Audio: its audio tower), the "
        "projector/merger excepted, gets no gradients and no optimizer state (ms-swift freeze_vit, EasyR1 "
        "freeze_vision_tower, VLM-R1 freeze_vision_modules). A family whose adapter names no tower is an error."
    )
    freeze_projector: bool = option(
        False, "Freeze the projector between the media encoder and the language model (Qwen-VL's merger, SmolVLM's "
        "connector, Qwen2-Audio's multi_modal_projector; ms-swift freeze_aligner)."
    )
    frozen: list[str] = option(
        [], "Parameter-name globs (fnmatch: * matches dots too) to freeze, matched against the names the loaded "
        "model gives (e.g. 'model.language_model.layers.0.*'); a glob matching no parameter is an error."
    )
    trainable: list[str] = option(
        [], "Parameter-name globs (as model.frozen); when non-empty ONLY matching parameters train (the freeze "
        "options still apply on top). With LoRA, adapters go only into modules none of whose weights are frozen."
    )


@dataclass
class LoraConfig:
    """Low-rank adapters (PEFT). With LoRA the reference model is the base with adapters off."""

    enabled: bool = option(False, "Train LoRA adapters instead of all weights.")
    r: int = option(16, "Adapter rank.", ge=1)
    alpha: float = option(32.0, "Adapter scaling numerator (scale = alpha / r; 2 x r is the common choice).", gt=0)
    dropout: float = option(0.05, "Dropout on the adapter input.", ge=0, lt=1)
    target_modules: list[str] = option(
        ["q_proj", "k_proj", "v_proj", "o_proj"],
        "Names of the linear layers that get adapters (the language model's attention).",
    )


@dataclass
class DatasetConfig:
    """One dataset of a mixture: a local/Hub dataset (``path``) or a generator (``recipe``).

    The data layer reads ``path`` datasets through ``data_recipes.loading.DatasetSpec``.
    """

    path: str | None = option(None, "Local file or folder (parquet, jsonl, arrow, load_from_disk) or Hub id.")
    recipe: str | None = option(
        None, "Procedural generator in data_recipes (e.g. clevr_count); used when path is unset."
    )
    recipe_args: dict[str, Any] = option({}, "Generator options, e.g. {n: 2000, min_count: 1, max_count: 6}.")
    split: str = option("train", "Split to read (train / test / validation, as the dataset names it).")
    adapter: str | None = option(
        None, "Column adapter for a public format (clevr70k, geometry3k, ...); None = detect (only a table of exactly "
        "an adapter's columns is detected)."
    )
    adapter_args: dict[str, Any] = option(
        {}, "{columns: {problem: COL, answer: COL, image: COL}}: read a custom table's columns as these fields."
    )
    task: str | None = option(None, "Task for this dataset's rows; None = task.name.")
    weight: float = option(1.0, "Mixture weight of data.train: share of prompts drawn from this dataset.", gt=0)
    limit: int | None = option(None, "Use at most this many rows; None = all.", ge=1)
    media_root: str | None = option(None, "Extra folder tried first for relative media paths (e.g. VLM-R1's images).")
    media_cache: str | None = option(None, "Folder for media embedded as bytes; None keeps the bytes in the rows.")
    check_media: bool = option(True, "Check each media file decodes at load time (bad rows are skipped and counted).")


# The embedded default's data: "how many objects" only, two shapes of one size, on the
# processor's mean colour (measured: on white, a tiny VLM does not learn to count).
DEFAULT_COUNTING_DATA = {
    "n": 2000,
    "attribute_question_prob": 0.0,
    "shapes": ["square", "circle"],
    "small_px": 14,
    "large_px": 14,
}


@dataclass
class DataConfig:
    """Training and evaluation data."""

    train: list[DatasetConfig] = option(
        [DatasetConfig(recipe="clevr_count", recipe_args=DEFAULT_COUNTING_DATA, split="train")],
        "Datasets prompts are drawn from, mixed by weight.",
    )
    test: list[DatasetConfig] = option(
        [DatasetConfig(recipe="clevr_count", recipe_args=DEFAULT_COUNTING_DATA, split="test")],
        "Held-out datasets for eval.",
    )
    dir: str | None = option(
        None, "Where generated datasets are written, each in a folder named by n, seed, every recipe option "
        "(defaults included) and a digest of the generation code, reused by later runs; None = <log.output_dir>/_cache/data."
    )
    max_prompt_tokens: int = option(
        1024, "Longer prompts (media tokens included) are dropped and counted, never truncated.", ge=1
    )
    shuffle: bool = option(True, "Shuffle training prompts each epoch.")
    seed: int = option(0, "Seed for generation, mixing and shuffling.")
    cache: bool = option(
        True, "Preprocessing cache: keep each prompt's processed media and token ids on disk and reuse them in "
        "later steps, epochs, stages (SFT, GRPO, eval) and runs; keyed by media content, budgets and processor."
    )
    cache_dir: str | None = option(None, "Folder of the preprocessing cache; None = $MMGRPO_CACHE_DIR or "
                                   "~/.cache/mmgrpo/prompts. Safe to share between concurrent runs.")
    cache_max_gb: float = option(
        20.0, "Size cap of the cache folder: past it the least recently used entries are removed.", gt=0
    )


DEFAULT_JUDGE_RUBRIC = (
    "Rate the answer to the question from 0 to 10 for correctness and clarity.\n"
    "Question: {problem}\nAnswer: {completion}\nReply with the score only."
)


@dataclass
class RewardModelConfig:
    """A model used as a reward (mmgrpo/reward_models.py): its ``name`` goes into ``task.rewards``."""

    name: str = option("", "The reward's name in task.rewards (must not be a registered reward's).")
    path: str = option("", "Local folder or Hub id of the checkpoint.")
    kind: Literal["classifier", "judge"] = option(
        "classifier", "classifier = AutoModelForSequenceClassification scoring prompt + completion (a trained "
        "reward model), or a supported VLM with value_head.safetensors scoring them with the sample's media; "
        "judge = a causal LM or VLM asked the rubric, its first number read as the score."
    )
    device: str = option("cpu", "Device the reward model runs on (cpu, cuda, cuda:1, ...); never trained.")
    dtype: Literal["float32", "bfloat16", "float16"] = option("float32", "Weights dtype of the reward model.")
    batch_size: int = option(16, "Completions per forward pass (classifier) or per generate call (judge).", ge=1)
    max_length: int = option(
        2048, "Tokens of prompt + completion kept (the start is cut when longer; a VLM's longer conversation "
        "gets no verdict, media tokens are never cut).", ge=8
    )
    label: int | None = option(
        None, "classifier with several labels: the label whose probability is the score; None = the single logit "
        "(or the last label)."
    )
    rubric: str = option(
        DEFAULT_JUDGE_RUBRIC, "judge: the question asked, with {problem}, {completion} and {answer} filled in."
    )
    max_score: float = option(10.0, "judge: the top of the rubric's scale; the score is scaled to 0-1.", gt=0)
    max_new_tokens: int = option(16, "judge: tokens it may generate for its verdict.", ge=1)


@dataclass
class TaskConfig:
    """What the model is asked and how completions are scored."""

    name: str = option("clevr_count", "Registered task (tasks/): prompt building, rewards and eval metric.")
    think: bool = option(
        False, "Ask for <think>...</think> before <answer> (DeepSeek-R1). Off in the tiny default: it answers directly."
    )
    rewards: dict[str, float] = option(
        {}, "Reward name -> weight, e.g. {accuracy: 1.0, format: 0.1}; empty = the task's defaults."
    )
    plugins: list[str] = option(
        [], "Python files or importable modules (package.module) registering tasks, rewards, adapters, generators "
        "or benchmarks; loaded before the config is checked, in every process of the run (installed packages with "
        "'mmgrpo.tasks' entry points load without being listed)."
    )
    reward_plugins: list[str] = option([], "Older name of task.plugins (files), loaded the same way.")
    reward_models: list[RewardModelConfig] = option(
        [], "Models used as rewards, e.g. [{name: rm, path: PATH, kind: classifier}]; weight them in task.rewards."
    )
    options: dict[str, Any] = option(
        {}, "Task constructor options, e.g. {coords: norm1000, iou_threshold: 0.5} for grounding (coords default: "
        "the model family's), {timeout_seconds: 2.0} for math; reach every task of the run; unknown ones are an error."
    )
    guards: dict[str, Any] = option(
        {}, "Reward-hacking guard settings (tasks.guards.Guards fields), e.g. {max_tokens: null, prompt_copy: false}; "
        "empty = the task's defaults."
    )
    reward_errors: Literal["raise", "skip"] = option(
        "skip", "A reward call that raises, times out or returns NaN/inf: skip = score that reward None for "
        "those completions, count and name it (reward/<name>/errors); raise = stop the run."
    )
    reward_timeout: float | None = option(
        60.0, "Seconds one reward call may take before it counts as an error; None = no limit.", gt=0
    )
    reward_workers: int = option(4, "Reward calls run in parallel across groups on this many worker threads.", ge=1)


@dataclass
class RolloutConfig:
    """How completions are sampled: P prompts x G completions per step."""

    engine: str = option(
        "hf", "Registered rollout engine (mmgrpo.rollout.ENGINES): hf = in-process transformers, "
        "vllm = a colocated vLLM engine (pip install 'mmgrpo[vllm]'), vllm_server = a vLLM server "
        "(mmgrpo rollout-serve) at rollout.server_url."
    )
    vllm: VLLMConfig = option(VLLMConfig(), "Options of the vllm engine (weights_dir also of vllm_server).")
    server_url: str | None = option(
        None, "vllm_server engine: the mmgrpo rollout-serve server, e.g. http://127.0.0.1:8000."
    )
    server_timeout_s: float = option(300.0, "vllm_server: seconds one request may take before it is retried.", gt=0)
    server_retries: int = option(3, "vllm_server: retries of a failed request (backoff 1, 2, 4 ... s).", ge=0)
    server_wait_s: float = option(
        60.0, "vllm_server: how long to wait for the server's /health before the first step.", ge=0
    )
    server_weight_sync: Literal["files", "broadcast"] = option(
        "files", "vllm_server: new weights through safetensors in rollout.vllm.weights_dir (a folder both sides "
        "see), or broadcast over a process group of the trainer and the server's workers (NCCL on GPUs, gloo on CPU)."
    )
    server_sync_address: str = option(
        "127.0.0.1:29555", "vllm_server broadcast: host:port of this trainer, reachable from the server's workers."
    )
    prompts_per_step: int = option(
        32, "P: prompts per training step (DAPO: 512).", ge=1
    )
    num_generations: int = option(
        8,
        "G: completions per prompt, one group; >= 2 since advantages are relative (DeepSeekMath: 64, DAPO: 16).",
        ge=2,
    )
    temperature: float = option(
        1.0, "Sampling temperature; 1.0 samples the policy as it is (TRL default, DAPO).", gt=0
    )
    top_p: float = option(1.0, "Nucleus sampling mass; 1.0 = off (TRL default, DAPO).", gt=0, le=1)
    top_k: int = option(0, "Keep the k most likely tokens; 0 = off (overrides transformers' default of 50).", ge=0)
    max_new_tokens: int = option(6, "Most tokens per completion; longer ones are truncated and flagged.", ge=1)
    tools: list[str] = option(
        [], "Tools the policy may call (registered: zoom_in, calculator, python, and task plugins'); needs max_turns > 1."
    )
    max_turns: int = option(
        1, "Policy turns per trajectory: a turn ending in a tool call gets the tool's result and another turn, up to "
        "this many (each at most max_new_tokens). 1 = single-turn.", ge=1,
    )
    max_observation_tokens: int = option(
        256, "Most tokens of one tool result shown to the policy (verl: max_tool_response_length); longer ones are cut.",
        ge=8,
    )
    max_trajectory_tokens: int | None = option(
        None, "Most tokens of a multi-turn trajectory after the prompt, the policy's and the tools' together (verl: "
        "response_length): a turn is cut where it would pass it (truncated), and a tool result that would leave no "
        "room for another turn is not shown (the trajectory ends before it, truncated). None: max_turns turns of "
        "max_new_tokens each, with the tools' results between them.", ge=1,
    )
    tool_schemas: bool = option(
        True, "Render the schemas of rollout.tools into each prompt through the model's chat template (tools=, as TRL "
        "and verl do), where the template has a tools block; a dataset row's own tools field takes precedence. false: "
        "the task's prompt alone says how to call.",
    )
    mode: Literal["sync", "async"] = option(
        "sync", "sync: sample, then train, in turn. async: a worker process per rank samples the next batches (its "
        "own engine and whole copy of the policy) while the trainer trains; see rollout.max_staleness and "
        "algo.is_correction."
    )
    max_staleness: int = option(
        1, "async: policy versions a batch may lag the policy it trains (1 = one-step-off-policy, 0 = the sync "
        "schedule through the worker).", ge=0,
    )
    worker_device: str | None = option(
        None, "async: the worker's device, e.g. cuda:1 (sampling and training on separate GPUs); None = the policy's."
    )
    worker_threads: int = option(0, "async: torch CPU threads of the worker (0 = torch's default).", ge=0)
    logprobs_source: Literal["trainer", "engine"] = option(
        "trainer", "Old log-probs of the PPO ratio: recomputed by the trainer, or the engine's of its sampled tokens "
        "(vLLM: saves a forward when mu > 1; the ratio then also corrects the engine/trainer mismatch). Either way "
        "rollout/logprob_gap_mean and _max log how far the two are apart (at temperature 1).",
    )

    @property
    def max_completion_tokens(self) -> int:
        """The most tokens a trajectory takes after its prompt (a tool result's images not counted)."""
        turns = self.max_turns
        return self.max_trajectory_tokens or turns * self.max_new_tokens + (turns - 1) * self.max_observation_tokens

    @property
    def prompt_tools(self) -> list[str]:
        """The tools whose schemas the prompts hold (``tool_schemas``)."""
        return list(self.tools) if self.tool_schemas else []


@dataclass
class TrainConfig:
    """Optimisation of the GRPO phase."""

    steps: int = option(600, "GRPO steps (one rollout batch each).", ge=0)
    lr: float = option(
        5e-4, "Peak AdamW learning rate. Tiny default; 1e-6 is usual for 3B-7B VLMs (DAPO, EasyR1).", gt=0
    )
    lr_schedule: Literal["constant", "cosine", "linear"] = option(
        "linear", "Decay after warm-up, to 0 at the last step."
    )
    warmup_ratio: float = option(0.0, "Share of steps with linear warm-up from 0.", ge=0, lt=1)
    weight_decay: float = option(0.0, "AdamW weight decay (TRL: 0.0; verl's DAPO recipe: 0.1).", ge=0)
    adam_beta1: float = option(0.9, "AdamW beta1 (PyTorch default).", ge=0, lt=1)
    adam_beta2: float = option(0.999, "AdamW beta2 (PyTorch default).", ge=0, lt=1)
    adam_eps: float = option(1e-8, "AdamW epsilon (PyTorch default).", gt=0)
    max_grad_norm: float = option(1.0, "Clip the gradient norm to this (TRL, verl: 1.0).", gt=0)
    micro_batch_size: int = option(
        64, "Completions per forward/backward; gradients accumulate over micro-batches.", ge=1
    )
    mini_batch_size: int | None = option(
        None, "Completions per optimizer step; None = the whole rollout batch (one step per iteration).", ge=1
    )
    logprob_chunk_tokens: int = option(
        1024, "Tokens whose vocabulary logits exist at once when log-probs (and entropy) are computed: the output "
        "head runs on this many at a time, each chunk recomputed in the backward. Memory ~4 x this x vocab x 4 bytes "
        "(1024 tokens, Qwen2.5's 152k vocabulary: ~2.5 GB); smaller saves memory at a slightly lower matmul speed.",
        ge=1,
    )
    max_tokens_per_micro_batch: int | None = option(
        None, "Micro-batches by token budget instead of micro_batch_size (verl use_dynamic_bsz): whole groups, "
        "balanced by their prompt + completion tokens, as few micro-batches as fit; all ranks run the same number. "
        "A group over the budget gets one of its own.", ge=1,
    )
    precision: Literal["fp32", "bf16", "fp16"] = option(
        "fp32", "Compute precision of the training forward/backward: bf16 or fp16 autocast (log-probs stay "
        "float32); fp16 adds dynamic loss scaling, for GPUs without bfloat16 (V100, T4)."
    )
    fp16_initial_scale: float = option(2.0**16, "fp16: the first loss scale (torch's and DeepSpeed's 2^16).", gt=0)
    fp16_growth_interval: int = option(
        2000, "fp16: clean steps before the loss scale doubles (it halves, and the step is skipped, on an overflow).",
        ge=1,
    )
    backend: Literal["single", "deepspeed", "fsdp2"] = option(
        "single", "Training back end (mmgrpo.trainer.backends): single = one process; deepspeed = DeepSpeed ZeRO "
        "(needs the deepspeed extra); fsdp2 = PyTorch fully_shard per block. Launch several ranks with torchrun."
    )
    zero_stage: Literal[2, 3] = option(
        2, "DeepSpeed ZeRO stage: 2 shards optimizer state and gradients, 3 also the weights."
    )
    offload_optimizer: bool = option(
        False, "deepspeed: keep optimizer state in CPU memory and step there (DeepSpeed's CPU Adam); "
        "fsdp2: keep weight shards, gradients and optimizer state in CPU memory (CPUOffloadPolicy)."
    )
    offload_parameters: bool = option(
        False, "deepspeed with zero_stage 3: keep each rank's weight shards in CPU memory between uses "
        "(ZeRO-Offload / ZeRO-Infinity's offload_param); slower, for models whose shards do not fit."
    )
    deepspeed_config: str | None = option(
        None, "Path of a DeepSpeed JSON merged over what this config implies; a key set both ways to different "
        "values is an error naming it ('auto' takes this config's value)."
    )
    collective_timeout_s: float = option(
        1800.0, "deepspeed, fsdp2: a collective waiting longer than this (a rank crashed or hangs) fails the run "
        "with an error instead of hanging (torch's default is 30 minutes).", gt=0
    )
    gradient_checkpointing: bool = option(False, "Recompute activations in backward to save memory.")
    group_shared_encoding: bool = option(
        True, "Encode each group's prompt and media once (rollout and log-probs); false = the plain per-sample path."
    )
    padding_free: bool = option(
        False, "Pack the training forward's sequences into rows without padding (verl use_remove_padding): "
        "first-fit by length into rows no wider than the longest; same log-probs. With group_shared_encoding a row "
        "holds completions of one prompt behind its cached states (needs sdpa or eager attention)."
    )
    device: str = option("auto", "auto, cpu, cuda or cuda:N.")
    num_threads: int | None = option(
        1, "torch CPU threads; None = torch's default. Tiny models on a small CPU run fastest with 1; "
        "set None (or more) for real models.", ge=1
    )

    @property
    def shards_weights(self) -> bool:
        """Whether the back end shards the weights (ZeRO-3, FSDP2): no rank holds the whole model."""
        return BACKEND_TRAITS[self.backend].shards_weights(self)


@dataclass
class SFTConfig:
    """Cold-start supervised fine-tuning before GRPO (DeepSeek-R1 pipeline)."""

    enabled: bool = option(True, "Run SFT before GRPO (the embedded default uses it to learn the answer format).")
    steps: int = option(100, "SFT optimizer steps.", ge=0)
    lr: float = option(3e-3, "Peak AdamW learning rate of SFT (tiny default).", gt=0)
    lr_schedule: Literal["constant", "cosine", "linear"] = option("constant", "Decay after warm-up.")
    warmup_ratio: float = option(0.0, "Share of SFT steps with linear warm-up.", ge=0, lt=1)
    batch_size: int = option(64, "Examples per SFT optimizer step.", ge=1)
    micro_batch_size: int = option(64, "Examples per forward/backward.", ge=1)
    padding_free: bool = option(
        False, "Pack each micro-batch's prompt + answer sequences into rows without padding (same loss)."
    )
    weight_decay: float = option(0.0, "AdamW weight decay of SFT.", ge=0)
    max_grad_norm: float = option(1.0, "Clip the SFT gradient norm to this.", gt=0)
    data: list[DatasetConfig] = option(
        [], "JSON-lines files (path only; every row is used) of prompt messages + completion, as `mmgrpo reject` "
        "writes; empty = data.train with the task's reference answers."
    )


@dataclass
class Config:
    """A whole mmgrpo run. Load with ``mmgrpo.config.load_config``."""

    seed: int = option(0, "Global seed (torch, numpy, python) of the run.")
    model: ModelConfig = option(ModelConfig(), "The policy model.")
    lora: LoraConfig = option(LoraConfig(), "LoRA adapters.")
    data: DataConfig = option(DataConfig(), "Datasets.")
    task: TaskConfig = option(TaskConfig(), "Task and rewards.")
    rollout: RolloutConfig = option(RolloutConfig(), "Sampling.")
    algo: AlgoConfig = option(AlgoConfig(), "GRPO objective.")
    train: TrainConfig = option(TrainConfig(), "GRPO optimisation.")
    sft: SFTConfig = option(SFTConfig(), "Cold-start SFT.")
    eval: EvalConfig = option(EvalConfig(), "Evaluation.")
    log: LogConfig = option(LogConfig(), "Logging.")
    checkpoint: CheckpointConfig = option(CheckpointConfig(), "Checkpointing.")

    @classmethod
    def from_dict(cls, mapping: dict[str, Any]) -> Config:
        """Build from nested plain data, coercing values; unknown keys raise ``ConfigError``. Not validated."""
        return build(cls, mapping)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain data (dicts, lists, scalars) that ``from_dict`` turns back into an equal config."""
        return dataclasses.asdict(self)

    def save_yaml(self, path: str | Path) -> None:
        """Write the resolved config as YAML (parent folders are created)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    def validate(self) -> Config:
        """Check ranges and cross-field rules; raise one ``ConfigError`` listing every problem."""
        validate_config(self)
        return self
