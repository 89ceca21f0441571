"""One flag per concept across every kbench command: the real parsers, walked.

No framework process: only the parsers are built (kbench.cli.app.build_parser and the
breakdown table's), each subcommand's options read from them. The checker is first
proven on a parser with planted mistakes, so a test that passes here can fail.
"""

from __future__ import annotations

import argparse
import logging
import re
from typing import Dict, List, Set

import pytest

from kbench import cli
from kbench.cli import app, distributed_table
from kbench.cli.arguments import (
    CONCEPTS,
    Renamed,
    add_backend_argument,
    add_renamed,
    add_store_argument,
    renamed_warning,
)


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
# A value for each old spelling (a new rename adds its own here).
SAMPLES = {
    "--output-dir": "some/store",
    "--only": "backend=jax",
    "--markdown": "tables.md",
    "--repeats": "7",
    "--warmup": "2",
    "--no-run": None,  # a switch: no value
}


def options(parser: argparse.ArgumentParser) -> List[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def spelling_problems(parser: argparse.ArgumentParser) -> List[str]:
    """Where ``parser`` spells a concept otherwise than :data:`CONCEPTS` says."""
    flags = {c.flag: c for c in CONCEPTS.values()}
    old = {s for c in CONCEPTS.values() for s in c.old}
    problems = []
    for action in options(parser):
        spellings = "/".join(action.option_strings)
        if isinstance(action, Renamed):
            concept = flags.get(action.new)
            if concept is None or not set(action.option_strings) <= set(concept.old):
                problems.append(f"{spellings}: renamed {action.new}, not a concept's old flag")
            elif action.dest not in concept.dests:
                problems.append(f"{spellings}: fills {action.dest}, not {action.new}'s place")
            continue
        for spelling in action.option_strings:
            concept = flags.get(spelling)
            if concept is not None and action.dest not in concept.dests:
                problems.append(f"{spelling} fills {action.dest}; expected {concept.dests}")
            if concept is None and spelling in old:
                problems.append(f"{spelling} is an old spelling, offered as a flag of its own")
        for name, concept in CONCEPTS.items():
            if action.dest in concept.dests and concept.flag not in action.option_strings:
                problems.append(f"{spellings}: the {name}, whose flag is {concept.flag}")
    return problems


def test_the_checker_finds_planted_spellings():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", dest="store")  # an old spelling, visible
    parser.add_argument("--warmup", dest="warmup_steps")  # a concept under another flag
    parser.add_argument("--repeats", dest="calls")  # a flag of one concept for another
    parser.add_argument("--seed", dest="random_state")  # a concept's flag, elsewhere
    add_renamed(parser, "--markdown", parser.add_argument("--title"))  # renamed to no concept
    assert spelling_problems(parser) == [
        "--output-dir is an old spelling, offered as a flag of its own",
        "--output-dir: the results store, whose flag is --store",
        "--warmup is an old spelling, offered as a flag of its own",
        "--warmup: the untimed warm-up iterations, whose flag is --warmup-steps",
        "--repeats fills calls; expected ('repeats',)",
        "--repeats: the timed calls per operation, whose flag is --calls",
        "--seed fills random_state; expected ('seed',)",
        "--markdown: renamed --title, not a concept's old flag",
    ]
    good = argparse.ArgumentParser()
    add_store_argument(good)
    assert spelling_problems(good) == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_concept_has_one_spelling(name):
    assert spelling_problems(COMMANDS[name]) == []


def test_the_concepts_are_where_the_issue_found_them():
    """The commands of each renamed spelling, so a walk that finds nothing fails."""
    renamed = {
        (name, old)
        for name, parser in COMMANDS.items()
        for action in options(parser)
        if isinstance(action, Renamed)
        for old in action.option_strings
    }
    writers = ["run", "demo", "max-batch", "parity", "sweep", "ops", "exec", "tune"]
    expected = {(name, "--output-dir") for name in writers} | {
        ("sweep", "--only"), ("compare", "--markdown"), ("ops", "--repeats"), ("ops", "--warmup"),
        ("reproduce", "--no-run"),
    }  # fmt: skip
    assert renamed == expected
    readers = ["results", "compare", "report", "reproduce", "distributed_table"]
    for name in writers + readers:
        assert "--store" in COMMANDS[name]._option_string_actions, name


@pytest.fixture
def kbench_logs(monkeypatch, caplog):
    """kbench's log records reach caplog, even after a cli.main in this process set up
    kbench's own handler."""
    logger = logging.getLogger("kbench")
    monkeypatch.setattr(logger, "propagate", True)
    monkeypatch.setattr(logger, "handlers", [])
    caplog.set_level(logging.WARNING)
    return caplog


def renamed_actions():
    return [
        pytest.param(name, action, id=f"{name} {action.option_strings[0]}")
        for name, parser in sorted(COMMANDS.items())
        for action in options(parser)
        if isinstance(action, Renamed)
    ]


def hidden(spelling: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(spelling)}(?![\w-])", text) is None


@pytest.mark.parametrize("name, action", renamed_actions())
def test_an_old_spelling_is_hidden_parses_alike_and_names_the_new_one(name, action, kbench_logs):
    parser = COMMANDS[name]
    (old,) = action.option_strings
    assert action.help == argparse.SUPPRESS
    assert hidden(old, parser.format_help()), f"{old} shows in kbench {name} --help"
    assert not hidden(action.new, parser.format_help())
    value = [] if SAMPLES[old] is None else [SAMPLES[old]]
    required = REQUIRED.get(name, [])
    by_old = parser.parse_args([*required, old, *value, old, *value])
    warning = renamed_warning(old, action.new)
    assert kbench_logs.text.count(warning) == 1, kbench_logs.text  # once per command line
    assert [r.levelno for r in kbench_logs.records] == [logging.WARNING]
    kbench_logs.clear()
    by_new = parser.parse_args([*required, action.new, *value, action.new, *value])
    assert warning not in kbench_logs.text
    assert getattr(by_old, action.dest) == getattr(by_new, action.dest)
    assert vars(by_old) == vars(by_new)


def test_the_warning_names_the_new_spelling():
    assert renamed_warning("--output-dir", "--store") == (
        "--output-dir is renamed --store; the old spelling goes in the next release"
    )


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
    repeats = COMMANDS[name]._option_string_actions.get("--repeats")
    has_repeats = repeats is not None and not isinstance(repeats, Renamed)  # ops: --calls
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
    dests = {d for c in CONCEPTS.values() for d in c.dests}
    for action in options(parser):
        switch = action.nargs == 0  # on or off: off is the default
        if action.dest in dests and action.help != argparse.SUPPRESS and not action.required:
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
            if isinstance(action, Renamed):
                continue
            flag = max(action.option_strings, key=len)  # the long spelling
            dests.setdefault(flag, set()).add(action.dest)
            flags.setdefault(action.dest, set()).add(flag)
    assert len(dests) > 40, sorted(dests)  # the walk saw the commands' flags
    assert {f: d for f, d in dests.items() if len(d) > 1} == {}
    assert {d: f for d, f in flags.items() if len(f) > 1} == {}
