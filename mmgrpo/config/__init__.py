"""The typed run config: one dataclass tree, loaded from defaults <- YAML <- dotted overrides.

    from mmgrpo.config import load_config
    config = load_config("recipes/clevr.yaml", ["algo.beta=0.04", "lora.enabled=true"])
    config.algo.beta  # 0.04

``describe_config()`` lists every key with its type, default and help.
"""

from mmgrpo.config.describe import describe_config
from mmgrpo.config.errors import ConfigError
from mmgrpo.config.loading import RECIPES_DIR, apply_overrides, list_recipes, load_config, resolve_recipe
from mmgrpo.config.run_sections import BenchmarkConfig, CheckpointConfig, EvalConfig, LogConfig
from mmgrpo.config.algo_section import AlgoConfig
from mmgrpo.config.schema import (
    Config,
    DataConfig,
    DatasetConfig,
    LoraConfig,
    ModelConfig,
    RolloutConfig,
    SFTConfig,
    TaskConfig,
    TrainConfig,
)

__all__ = [
    "RECIPES_DIR",
    "AlgoConfig",
    "CheckpointConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "BenchmarkConfig",
    "DatasetConfig",
    "EvalConfig",
    "LogConfig",
    "LoraConfig",
    "ModelConfig",
    "RolloutConfig",
    "SFTConfig",
    "TaskConfig",
    "TrainConfig",
    "apply_overrides",
    "describe_config",
    "list_recipes",
    "load_config",
    "resolve_recipe",
]
