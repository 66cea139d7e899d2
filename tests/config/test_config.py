"""The typed config: layering (defaults <- YAML <- overrides), coercion, validation messages, round trip."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
from pathlib import Path
from typing import Callable

import pytest
import yaml

import mmgrpo.config.loading as loading
import mmgrpo.config.validation as validation
from mmgrpo.cli import main
from mmgrpo.config import Config, ConfigError, apply_overrides, describe_config, load_config
from mmgrpo.config.fields import field_help
from mmgrpo.registry import Registry


def write_yaml(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def error_of(overrides: list[str], recipe: Path | str | None = None) -> str:
    """The message of the ``ConfigError`` that loading ``recipe`` + ``overrides`` raises."""
    with pytest.raises(ConfigError) as caught:
        load_config(recipe, overrides)
    return str(caught.value)


def leaf_keys(cls: type = Config, prefix: str = "") -> list[str]:
    """Dotted names of every non-section field of ``cls`` (list items as ``key[N].field``)."""
    keys = []
    for f in dataclasses.fields(cls):
        default = getattr(cls(), f.name)
        if dataclasses.is_dataclass(default):
            keys += leaf_keys(type(default), f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def all_fields(cls: type = Config) -> list[tuple[str, dataclasses.Field]]:
    out = []
    for f in dataclasses.fields(cls):
        out.append((f"{cls.__name__}.{f.name}", f))
        default = getattr(cls(), f.name)
        if dataclasses.is_dataclass(default):
            out += all_fields(type(default))
        elif isinstance(default, list) and default and dataclasses.is_dataclass(default[0]):
            out += all_fields(type(default[0]))
    return out


# --- layering --------------------------------------------------------------------------


def test_no_recipe_and_no_overrides_gives_the_dataclass_defaults() -> None:
    assert load_config() == Config()


def test_yaml_overrides_defaults_and_command_line_overrides_yaml(tmp_path: Path) -> None:
    recipe = write_yaml(tmp_path / "r.yaml", {"algo": {"beta": 0.04, "eps_high": 0.28}, "train": {"steps": 7}})

    config = load_config(recipe, ["algo.beta=0.01", "seed=3"])

    assert config.algo.beta == 0.01  # override beats YAML
    assert config.algo.eps_high == 0.28  # YAML beats default
    assert config.train.steps == 7
    assert config.seed == 3
    assert config.algo.eps_low == Config().algo.eps_low  # untouched keys of a merged section keep defaults


def test_later_override_of_the_same_key_wins() -> None:
    assert load_config(None, ["algo.beta=0.1", "algo.beta=0.2"]).algo.beta == 0.2


def test_recipe_is_found_by_name_in_the_recipes_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_yaml(tmp_path / "fast.yaml", {"train": {"steps": 3}})
    monkeypatch.setattr(loading, "RECIPES_DIR", tmp_path)

    assert load_config("fast").train.steps == 3
    with pytest.raises(ConfigError, match=r"no config file or recipe named 'fsat'\. Did you mean 'fast'\?"):
        load_config("fsat")


def test_packaged_default_recipe_loads() -> None:
    assert load_config("default").rollout == Config().rollout


def test_empty_yaml_file_means_defaults(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing set\n")
    assert load_config(empty) == Config()


def test_apply_overrides_leaves_the_base_config_unchanged() -> None:
    base = Config()
    changed = apply_overrides(base, ["lora.enabled=true"])
    assert changed.lora.enabled and not base.lora.enabled


# --- coercion --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "read", "expected"),
    [
        ("train.lr=1e-4", lambda c: c.train.lr, 1e-4),  # PyYAML reads 1e-4 as a string
        ("algo.eps_high=1", lambda c: c.algo.eps_high, 1.0),
        ("train.steps=1e3", lambda c: c.train.steps, 1000),
        ("lora.enabled=yes", lambda c: c.lora.enabled, True),
        ("lora.enabled=false", lambda c: c.lora.enabled, False),
        ("algo.dual_clip=3", lambda c: c.algo.dual_clip, 3.0),
        ("algo.kl_clamp=null", lambda c: c.algo.kl_clamp, None),
        ("checkpoint.resume=none", lambda c: c.checkpoint.resume, None),
        ("log.run_name=2024", lambda c: c.log.run_name, "2024"),
        ("lora.target_modules=[q_proj,v_proj]", lambda c: c.lora.target_modules, ["q_proj", "v_proj"]),
        ("task.rewards.format=0.5", lambda c: c.task.rewards, {"format": 0.5}),
        ("task.rewards={accuracy: 1, format: 0.1}", lambda c: c.task.rewards, {"accuracy": 1.0, "format": 0.1}),
        ("data.train.0.limit=7", lambda c: c.data.train[0].limit, 7),
    ],
)
def test_override_values_are_parsed_and_coerced_to_the_field_type(
    override: str, read: Callable[[Config], object], expected: object
) -> None:
    value = read(load_config(None, [override]))
    assert value == expected
    assert type(value) is type(expected)


def test_yaml_values_are_coerced_like_overrides(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("train:\n  lr: 1e-6\n  steps: 10.0\nmodel:\n  trust_remote_code: on\n")
    config = load_config(recipe)
    assert (config.train.lr, config.train.steps, config.model.trust_remote_code) == (1e-6, 10, True)
    assert type(config.train.lr) is float and type(config.train.steps) is int


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.steps=abc", r"train\.steps: expected an integer, got 'abc'"),
        ("train.steps=1.5", r"train\.steps: expected an integer, got 1\.5"),
        ("train.lr=fast", r"train\.lr: expected a number, got 'fast'"),
        ("lora.enabled=maybe", r"lora\.enabled: expected true or false, got 'maybe'"),
        ("lora.target_modules=q_proj", r"lora\.target_modules: expected a list such as \[a, b\], got 'q_proj'"),
        ("task.rewards=[1]", r"task\.rewards: expected a mapping"),
        ("task.rewards.format=high", r"task\.rewards\.format: expected a number, got 'high'"),
        ("algo=3", r"algo: expected a mapping of AlgoConfig options, got 3"),
        ("log.run_name=[a]", r"log\.run_name: expected a string"),
    ],
)
def test_a_value_of_the_wrong_type_names_the_key_and_the_expected_type(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


# --- unknown keys, Literals, override syntax ---------------------------------------------


def test_unknown_override_key_names_the_closest_valid_key() -> None:
    expected = "override 'algo.bta=1': unknown config key 'algo.bta'. Did you mean 'algo.beta'?"
    assert error_of(["algo.bta=1"]) == expected


def test_unknown_yaml_section_names_the_file_and_the_closest_section(tmp_path: Path) -> None:
    recipe = write_yaml(tmp_path / "typo.yaml", {"algoo": {"beta": 0.1}})
    assert error_of([], recipe) == f"{recipe}: unknown config key 'algoo'. Did you mean 'algo'?"


def test_unknown_key_without_a_close_match_lists_the_valid_keys() -> None:
    expected = "unknown config key 'lora.zzz'. Valid keys under 'lora': enabled, r, alpha, dropout, target_modules."
    assert expected in error_of(["lora.zzz=1"])


def test_unknown_key_inside_a_list_item_names_its_index() -> None:
    expected = "unknown config key 'data.train[0].pth'. Did you mean 'data.train[0].path'?"
    assert expected in error_of(["data.train.0.pth=/data"])


def test_a_literal_value_outside_its_choices_lists_the_allowed_ones() -> None:
    message = error_of(["algo.loss_agg=token_mean"])
    choices = "'token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'"
    assert f"algo.loss_agg: 'token_mean' is not one of {choices}." in message
    assert "Did you mean 'token-mean'" in message


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algo.beta", r"override 'algo\.beta' must look like dotted\.key=value"),
        ("=3", r"must look like dotted\.key=value"),
        ("data.train.4.limit=1", r"'4' after 'data\.train' must be a list index below 1"),
        ("algo.beta.x=1", r"'algo\.beta' is a value, not a section"),
        ("task.rewards={a: [}", r"the value is not valid YAML"),
    ],
)
def test_malformed_overrides_say_what_is_wrong(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_invalid_yaml_and_non_mapping_files_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("algo: {beta: [\n")
    assert error_of([], broken).startswith(f"{broken}: not valid YAML")
    listed = write_yaml(tmp_path / "list.yaml", [1, 2])
    assert error_of([], listed) == f"{listed}: expected a mapping of config sections at the top level, got list"


# --- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["rollout.prompts_per_step=4", "rollout.num_generations=8", "train.micro_batch_size=5"],
            "rollout batch rollout.prompts_per_step=4 x rollout.num_generations=8 = 32 is not divisible by "
            "train.micro_batch_size=5",
        ),
        (
            ["rollout.prompts_per_step=4", "train.mini_batch_size=12", "train.micro_batch_size=4"],
            "rollout batch rollout.prompts_per_step=4 x rollout.num_generations=8 = 32 is not divisible by "
            "train.mini_batch_size=12",
        ),
        (
            ["rollout.prompts_per_step=4", "train.mini_batch_size=16", "train.micro_batch_size=5"],
            "train.mini_batch_size=16 is not divisible by train.micro_batch_size=5",
        ),
        (
            ["sft.batch_size=10", "sft.micro_batch_size=4"],
            "sft.batch_size=10 is not divisible by sft.micro_batch_size=4",
        ),
        (
            ["algo.dynamic_group_size=true", "algo.group_size_min=10", "algo.group_size_max=16"],
            "dynamic group size needs algo.group_size_min=10 <= rollout.num_generations=8 <= algo.group_size_max=16",
        ),
        (["rollout.num_generations=1"], "rollout.num_generations=1 must be >= 2"),
        (["algo.eps_low=0"], "algo.eps_low=0.0 must be > 0"),
        (["algo.eps_high=-0.1"], "algo.eps_high=-0.1 must be > 0"),
        (["algo.dual_clip=1"], "algo.dual_clip=1.0 must be > 1"),
        (["rollout.top_p=1.5"], "rollout.top_p=1.5 must be <= 1"),
        (["algo.beta=-0.01"], "algo.beta=-0.01 must be >= 0"),
        (["data.train.0.weight=0"], "data.train[0].weight=0.0 must be > 0"),
        (
            ["algo.overlong_buffer=16", "rollout.max_new_tokens=16"],
            "algo.overlong_buffer=16 must be smaller than rollout.max_new_tokens=16",
        ),
        (["eval.samples=4", "eval.temperature=0"], "eval.samples=4 needs eval.temperature > 0"),
        (["lora.enabled=true", "lora.target_modules=[]"], "lora.target_modules is empty"),
        (["rollout.engine=sglang"], "rollout.engine: unknown rollout engine 'sglang'"),
        (
            ["algo.is_correction=mis", "rollout.logprobs_source=engine"],
            "algo.is_correction=mis weights by trainer / sampler log-probs, but rollout.logprobs_source=engine",
        ),
        (["algo.is_correction=tis", "rollout.temperature=0.7"], "algo.is_correction=tis needs rollout.temperature=1"),
        (["rollout.max_staleness=2"], "rollout.max_staleness=2 is read only by rollout.mode=async"),
        (["rollout.tools=[calculator]"], "tools need max_turns > 1"),
        (["rollout.max_turns=3"], "more turns need tools"),
        (["rollout.tools=[calculator]", "rollout.max_turns=2", "rollout.max_new_tokens=16",
          "rollout.max_trajectory_tokens=8"], "rollout.max_trajectory_tokens=8 is less than rollout.max_new_tokens=16"),
        (["model.min_pixels=20000"], "model.min_pixels=20000 is larger than model.max_pixels=12544"),
        (
            ["data.train.0.path=/data/x"],
            "data.train[0]: set exactly one of path (a dataset) or recipe (a generator), got both",
        ),
        (["data.test=[{split: test}]"], "data.test[0]: set exactly one of path (a dataset) or recipe"),
        (["data.train=[]"], "data.train is empty"),
    ],
)
def test_validation_errors_name_the_keys_and_numbers_that_disagree(overrides: list[str], message: str) -> None:
    assert message in error_of(overrides)


def test_every_problem_is_reported_at_once() -> None:
    message = error_of(["algo.eps_low=0", "train.micro_batch_size=5", "lora.enabled=true", "lora.target_modules=[]"])
    assert message.startswith("invalid config:")
    assert message.count("\n  - ") == 3


def test_a_valid_variant_passes() -> None:
    config = load_config(None, [
        "algo.eps_high=0.28", "algo.dual_clip=3", "algo.loss_agg=seq-mean-token-sum-norm", "algo.scale_std=false",
        "algo.dynamic_sampling=true", "algo.overlong_buffer=4", "eval.samples=4", "eval.temperature=0.7",
        "train.gradient_checkpointing=true",  # with group-shared encoding (on by default)
    ])
    assert config.algo.dual_clip == 3.0 and config.eval.samples == 4
    assert config.train.gradient_checkpointing and config.train.group_shared_encoding


def test_registered_names_are_checked_against_their_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("fake_algos")
    fake.ESTIMATORS = Registry("advantage estimator")
    for name in ("grpo", "rloo"):
        fake.ESTIMATORS.add(name, object())
    monkeypatch.setitem(sys.modules, "fake_algos", fake)
    monkeypatch.setattr(validation, "REGISTERED_KEYS", {"algo.advantage_estimator": ("fake_algos", "ESTIMATORS")})

    assert load_config(None, ["algo.advantage_estimator=rloo"]).algo.advantage_estimator == "rloo"
    message = error_of(["algo.advantage_estimator=grpoo"])
    assert message.startswith("algo.advantage_estimator: unknown advantage estimator 'grpoo'.")
    assert message.endswith("Known: grpo, rloo")


def test_a_registry_module_that_does_not_exist_yet_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation, "REGISTERED_KEYS", {"rollout.engine": ("mmgrpo_no_such_module", "ENGINES")})
    assert load_config().rollout.engine == "hf"


# --- round trip, docs, CLI -------------------------------------------------------------------

CHANGED = [
    "seed=5", "algo.beta=0.04", "algo.dual_clip=3", "train.lr=1e-6", "task.rewards={accuracy: 1.0, format: 0.25}",
    "lora.enabled=true", "lora.target_modules=[q_proj]", "data.train=[{path: /d/clevr, adapter: clevr70k, limit: 9}]",
    "checkpoint.keep_last=null", "model.tiny_options={hidden_size: 64}",
]


def test_save_yaml_then_load_gives_an_equal_config(tmp_path: Path) -> None:
    config = load_config(None, CHANGED)
    config.save_yaml(tmp_path / "run" / "config.yaml")

    assert load_config(tmp_path / "run" / "config.yaml") == config
    assert Config.from_dict(config.to_dict()) == config
    assert config != Config()


def test_every_field_has_help_text() -> None:
    missing = [name for name, f in all_fields() if not field_help(f).strip()]
    assert not missing, f"fields without help: {missing}"


def test_describe_config_lists_every_key_with_its_help() -> None:
    text = describe_config()
    for key in leaf_keys():
        assert f"\n{key}: " in f"\n{text}", key
    assert "data.train[N].recipe: str | None = None" in text
    assert "algo.eps_high: float = 0.2\n    Upper clip range" in text


def test_cli_config_prints_the_resolved_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "algo.beta=0.04", "train.steps=3"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["algo"]["beta"] == 0.04 and printed["train"]["steps"] == 3


def test_cli_config_reports_a_bad_override_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "algo.bta=1"]) == 2
    assert "Did you mean 'algo.beta'?" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_the_vllm_engine_without_vllm_names_the_install_and_the_alternative() -> None:
    with pytest.raises(ConfigError) as error:
        load_config(None, ["rollout.engine=vllm"])
    assert "vLLM is not installed" in str(error.value)
    assert "scripts/vllm_cpu_env.sh" in str(error.value) and "rollout.engine=hf" in str(error.value)


def test_an_engine_over_ranks_must_divide_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ConfigError, match=r"rollout.vllm.tensor_parallel_size=3 does not divide the 4 ranks launched"):
        load_config(None, ["rollout.engine=vllm", "rollout.vllm.tensor_parallel_size=3"])
    try:
        load_config(None, ["rollout.engine=vllm", "rollout.vllm.tensor_parallel_size=2"])
    except ConfigError as error:  # vLLM is not installed here
        assert "tensor_parallel_size" not in str(error)


def test_the_longest_trajectory_after_its_prompt_bounds_the_vllm_context():
    """``rollout.max_completion_tokens`` (vLLM's default context beyond the prompt): the trajectory budget, else the
    turns with a tool result between each two."""
    assert apply_overrides({}, ["rollout.max_new_tokens=32"]).rollout.max_completion_tokens == 32
    tools = ["rollout.tools=[zoom_in]", "rollout.max_turns=3", "rollout.max_new_tokens=32",
             "rollout.max_observation_tokens=64"]
    assert apply_overrides({}, tools).rollout.max_completion_tokens == 3 * 32 + 2 * 64
    assert apply_overrides({}, [*tools, "rollout.max_trajectory_tokens=100"]).rollout.max_completion_tokens == 100
