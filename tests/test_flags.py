"""One flag per concept across every kbench command: the real parsers, walked.

A run setting's flag is its RunConfig field's (kbench.results.config.Setting): the
flag list, the copy of parsed flags into configs and the flag an error names are one
thing, checked here on every command. The other shared concepts have one spelling each
(:data:`CONCEPTS`); the old spellings 0.1.0 dropped are refused. No framework process:
only the parsers are built (kbench.cli.app.build_parser and the breakdown table's),
each subcommand's options read from them. Each checker is first proven on a parser
with planted mistakes, so a test that passes here can fail.
"""

from __future__ import annotations

import argparse
import re
from typing import Dict, List, Set

import pytest

from kbench import cli
from kbench.cli import app, distributed_table
from kbench.cli.arguments import add_backend_argument, add_settings, add_store_argument, settings_of
from kbench.results.config import ConfigError, RunConfig, flag_for, settings


def commands() -> Dict[str, argparse.ArgumentParser]:
    """Every kbench subcommand's parser by name, and the breakdown table's."""
    parser = app.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found = dict(sub.choices)
    found["distributed_table"] = distributed_table.build_parser()
    return found


COMMANDS = commands()
# What each command needs besides the flag under test to parse at all.
REQUIRED = {
    "run": ["--backend", "jax"],
    "max-batch": ["--backend", "jax", "--model", "mlp"],
    "sweep": ["sweep.yaml"],
    "exec": ["--backend", "jax"],
    "tune": ["--backend", "jax"],
}
# The run settings that have flags of their own, by flag: the flag is the setting's.
SETTING_FLAGS = {flag_for(name): name for name, about in settings().items() if about.help}
# The other concepts several commands share: one flag each, filling one attribute.
CONCEPTS = {
    "--store": "store", "--filter": "filter", "--output": "output", "--repeats": "repeats",
    "--try": "only", "--calls": "calls", "--backend": "backend", "--model": "model",
    "--baseline": "baseline", "--dry-run": "dry_run", "--ratio-precision": "ratio_precision",
    "--ratio-budget": "ratio_budget_s",
}  # fmt: skip
# The old spellings (hidden aliases) 0.1.0 dropped, and the commands that had them.
WRITERS = ["run", "demo", "max-batch", "parity", "sweep", "ops", "exec", "tune"]
DROPPED = {(name, "--output-dir") for name in WRITERS} | {
    ("sweep", "--only"), ("compare", "--markdown"), ("ops", "--repeats"), ("ops", "--warmup"),
    ("reproduce", "--no-run"),
}  # fmt: skip
SAMPLES = {"--output-dir": "some/store", "--only": "backend=jax", "--markdown": "tables.md",
           "--repeats": "7", "--warmup": "2", "--no-run": None}  # fmt: skip


def options(parser: argparse.ArgumentParser) -> List[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def spelling_problems(parser: argparse.ArgumentParser) -> List[str]:
    """Where ``parser`` spells a concept otherwise than its one flag (a run setting's:
    :func:`flag_for` of its field; the others: :data:`CONCEPTS`), or offers a dropped
    spelling."""
    flags = {**SETTING_FLAGS, **CONCEPTS}
    dests = {dest: flag for flag, dest in flags.items()}
    dropped = {old for _, old in DROPPED} - set(flags)
    problems = []
    for action in options(parser):
        spellings = "/".join(action.option_strings)
        for spelling in action.option_strings:
            if spelling in flags and action.dest != flags[spelling]:
                problems.append(f"{spelling} fills {action.dest}; expected {flags[spelling]}")
            if spelling in dropped:
                problems.append(f"{spelling} is a dropped spelling, offered again")
        flag = dests.get(action.dest)
        if flag is not None and flag not in action.option_strings:
            problems.append(f"{spellings}: fills {action.dest}, whose flag is {flag}")
    return problems


def test_the_checker_finds_planted_spellings():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", dest="store")  # a dropped spelling, back
    parser.add_argument("--warmup", dest="warmup_steps")  # a setting under another flag
    parser.add_argument("--repeats", dest="calls")  # a flag of one concept for another
    parser.add_argument("--seed", dest="random_state")  # a setting's flag, elsewhere
    parser.add_argument("--timeout", type=float)  # a setting's flag, the unit left out
    assert spelling_problems(parser) == [
        "--output-dir is a dropped spelling, offered again",
        "--output-dir: fills store, whose flag is --store",
        "--warmup is a dropped spelling, offered again",
        "--warmup: fills warmup_steps, whose flag is --warmup-steps",
        "--repeats fills calls; expected repeats",
        "--repeats: fills calls, whose flag is --calls",
        "--seed fills random_state; expected seed",
        "--timeout fills timeout; expected timeout_s",
    ]
    good = argparse.ArgumentParser()
    add_store_argument(good)
    add_settings(good, ["warmup_steps", "seed", "timeout_s"])
    assert spelling_problems(good) == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_concept_has_one_spelling(name):
    assert spelling_problems(COMMANDS[name]) == []


def hidden(spelling: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(spelling)}(?![\w-])", text) is None


@pytest.mark.parametrize("name, old", sorted(DROPPED))
def test_a_dropped_spelling_is_refused_and_not_shown(capsys, name, old):
    """0.1.0 has no users to migrate: the rename aliases are gone, each refused as an
    unknown flag, or (``--warmup``) read as argparse reads any prefix of one flag: as
    that flag (``--warmup-steps``), not as an alias of ours."""
    parser = COMMANDS[name]
    assert old not in parser._option_string_actions
    assert hidden(old, parser.format_help()), f"{old} shows in kbench {name} --help"
    value = [] if SAMPLES[old] is None else [SAMPLES[old]]
    required = REQUIRED.get(name, [])
    prefix_of = [flag for flag in parser._option_string_actions if flag.startswith(old)]
    if len(prefix_of) == 1:
        by_prefix = parser.parse_args([*required, old, *value])
        assert vars(by_prefix) == vars(parser.parse_args([*required, *prefix_of, *value]))
        return
    with pytest.raises(SystemExit) as caught:
        parser.parse_args([*required, old, *value])
    assert caught.value.code == 2
    assert f"unrecognized arguments: {old}" in capsys.readouterr().err


def test_every_command_that_writes_or_reads_a_store_takes_store():
    readers = ["results", "compare", "report", "reproduce", "distributed_table"]
    for name in WRITERS + readers:
        assert "--store" in COMMANDS[name]._option_string_actions, name


def setting_actions():
    """(command, action) of every run setting's flag in every command."""
    return [
        pytest.param(name, action, id=f"{name} {action.option_strings[0]}")
        for name, parser in sorted(COMMANDS.items())
        for action in options(parser)
        if action.dest in SETTING_FLAGS.values()
    ]


@pytest.mark.parametrize("name, action", setting_actions())
def test_a_setting_flag_is_its_fields(name, action):
    """Name, metavar and help as the field's Setting says; the default the field's, or
    the command's own (said in its help)."""
    about = settings()[action.dest]
    assert action.option_strings == [flag_for(action.dest)]
    assert action.help and "{" not in action.help  # every {word} filled
    if action.nargs == 0:  # a switch: off by default
        assert action.default is False
        return
    assert action.metavar == about.metavar
    assert "default" in action.help
    field_default = RunConfig.__dataclass_fields__[action.dest].default
    if action.default != field_default:
        shown = f"{action.default:g}" if isinstance(action.default, float) else action.default
        assert f"(default: {shown})" in action.help, (name, action.help)


def test_every_run_setting_with_a_flag_is_one_of_kbench_runs():
    """The flag list of kbench run is the metadata's; the attributes its flags fill are
    the settings settings_of copies into configs, every one."""
    run = COMMANDS["run"]
    flagged = {name for name, about in settings().items() if about.help}
    assert flagged == set(settings()) - {"backend", "model", "repeat"}
    assert {a.dest for a in options(run)} & set(settings()) == flagged | {"backend", "model"}
    args = run.parse_args(["-b", "jax"])
    assert set(settings_of(args)) == flagged


def test_parsed_flags_reach_the_config_by_their_names():
    """Every setting's flag given a value other than its default, parsed, copied
    (settings_of) into a RunConfig: each value arrives."""
    argv = ["-b", "torch", "--dataset", "synthetic", "--batch-size", "8", "--steps", "3",
            "--warmup-steps", "1", "--optimizer", "sgd", "--learning-rate", "0.01",
            "--train-samples", "64", "--test-samples", "16", "--input-shape", "8x8x1",
            "--num-classes", "3", "--threads", "1", "--inter-op-threads", "1", "--seed", "3",
            "--timeout", "60", "--sample-interval", "0.5", "--device", "cpu",
            "--gpu-memory-fraction", "0.5", "--gpu-memory-growth", "--jit-compile", "off",
            "--run-eagerly", "--mixed-precision", "bfloat16", "--tf32", "off",
            "--onednn", "off", "--repeats", "2"]  # fmt: skip
    args = COMMANDS["run"].parse_args(argv)
    config = RunConfig(backend="torch", model="mlp", **settings_of(args))
    assert (config.batch_size, config.steps, config.epochs, config.warmup_steps) == (8, 3, None, 1)
    assert (config.optimizer, config.learning_rate, config.seed) == ("sgd", 0.01, 3)
    assert (config.train_samples, config.test_samples, config.num_classes) == (64, 16, 3)
    assert config.input_shape == (8, 8, 1) and (config.threads, config.inter_op_threads) == (1, 1)
    assert (config.timeout_s, config.sample_interval_s, config.device) == (60.0, 0.5, "cpu")
    assert (config.gpu_memory_fraction, config.gpu_memory_growth) == (0.5, True)
    assert config.switches() == {
        "jit_compile": "off", "run_eagerly": True, "torch_compile": False,
        "mixed_precision": "bfloat16", "hybridize": False, "tf32": "off", "onednn": "off",
        "mxnet_gpus": 0,
    }  # fmt: skip


@pytest.mark.parametrize("setting", sorted(n for n, a in settings().items() if a.help))
def test_an_error_names_the_flag_kbench_run_takes(setting):
    """The error-name mapping is the flag list: a ConfigError about any setting is shown
    with a flag kbench run has (kbench.cli.app.main: flag_for)."""
    assert flag_for(ConfigError(setting, "x").setting) in COMMANDS["run"]._option_string_actions


def test_an_error_is_shown_with_the_flag_as_typed(capsys):
    code = None
    with pytest.raises(SystemExit) as caught:
        cli.main(["run", "-b", "jax", "--sample-interval", "61", "--store", "/nonexistent/x"])
    code = caught.value.code
    err = capsys.readouterr().err
    assert code == 2 and "kbench run: error: --sample-interval: expected a finite number" in err


def backend_commands():
    return sorted(name for name, p in COMMANDS.items() if "--backend" in p._option_string_actions)


def test_every_command_that_runs_backends_takes_backend():
    assert backend_commands() == ["demo", "exec", "max-batch", "ops", "parity", "run", "tune"]
    for name in backend_commands():
        action = COMMANDS[name]._option_string_actions["--backend"]
        assert action.option_strings == ["--backend", "-b"], name


def refusal(capsys, name: str, argv: List[str]) -> str:
    parser = COMMANDS[name]
    required = [a for a in REQUIRED.get(name, []) if a not in ("--backend", "jax")]
    with pytest.raises(SystemExit) as caught:
        parser.parse_args([*required, *argv])
    assert caught.value.code == 2
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("name", backend_commands())
def test_backend_refuses_a_duplicate_and_an_unknown_name(capsys, name):
    err = refusal(capsys, name, ["--backend", "jax,torch,jax"])
    assert "--backend/-b: expected each of the backends once; received 'jax' twice" in err
    assert "Drop the second one" in err
    # the hint names --repeats only where the command has it
    has_repeats = "--repeats" in COMMANDS[name]._option_string_actions  # ops: --calls
    assert ("use --repeats N" in err) == has_repeats, (name, err)
    err = refusal(capsys, name, ["-b", "jax,pytorch"])
    assert "--backend/-b: expected one of tensorflow, jax" in err
    assert "received 'pytorch'. Did you mean 'torch'?" in err
    err = refusal(capsys, name, ["-b", "tensorflw"])
    assert "Did you mean 'tensorflow'?" in err


@pytest.mark.parametrize("name", ["run", "parity", "max-batch"])
def test_a_model_given_twice_is_refused_with_a_hint_the_command_can_follow(capsys, name):
    err = refusal(capsys, name, ["-m", "mlp,mlp"])
    assert "expected each of the models once; received 'mlp' twice" in err
    assert ("use --repeats N" in err) == (name == "run"), err


def test_max_batch_takes_one_backend(capsys):
    err = refusal(capsys, "max-batch", ["-b", "jax,torch"])
    assert "expected one of the backends; received 2 in 'jax,torch'" in err
    args = COMMANDS["max-batch"].parse_args(["-b", "jax", "-m", "mlp"])
    assert (args.backend, args.model) == ("jax", "mlp")


def test_the_backend_type_is_the_one_definition():
    """A parser built with add_backend_argument refuses what the commands refuse."""
    parser = argparse.ArgumentParser()
    add_backend_argument(parser, ["a", "b"])
    assert parser.parse_args(["-b", "a,b"]).backend == ["a", "b"]
    with pytest.raises(SystemExit):
        parser.parse_args(["-b", "a,a"])


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_renders_and_shows_the_defaults_of_every_concept(capsys, name):
    parser = COMMANDS[name]
    text = parser.format_help()
    assert text.startswith("usage:") and "options:" in text
    dests = set(CONCEPTS.values()) | set(settings())
    for action in options(parser):
        switch = action.nargs == 0  # on or off: off is the default
        if action.dest in dests and not action.required:
            if switch:
                continue
            assert "default" in action.help, (name, action.option_strings, action.help)
    if name != "distributed_table":
        with pytest.raises(SystemExit) as caught:
            cli.main([name, "--help"])
        assert caught.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: kbench {name}")


def test_across_commands_each_flag_fills_one_attribute_and_each_attribute_has_one_flag():
    """The rule behind CONCEPTS, read off the parsers: a concept nobody listed is caught
    too (a flag that fills ``output_dir`` in one command and ``store`` in another)."""
    dests: Dict[str, Set[str]] = {}
    flags: Dict[str, Set[str]] = {}
    for parser in COMMANDS.values():
        for action in options(parser):
            flag = max(action.option_strings, key=len)  # the long spelling
            dests.setdefault(flag, set()).add(action.dest)
            flags.setdefault(action.dest, set()).add(flag)
    assert len(dests) > 40, sorted(dests)  # the walk saw the commands' flags
    assert {f: d for f, d in dests.items() if len(d) > 1} == {}
    assert {d: f for d, f in flags.items() if len(f) > 1} == {}
