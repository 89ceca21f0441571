"""Verdicts that say "inconclusive" when they cannot know (issue 26), and study files
that refuse what is wrong (issue 30, cases 7 and 10).

Each case of issue 26's first list is rebuilt with a store of result documents written
here for the studies' own sweeps (their real run keys, sweep provenance and groups),
judged by the code ``kbench reproduce`` runs: no training, no framework process. Each
shows the verdict inconclusive (or corrected) where the old rule, the median alone,
gave holds or does not hold, and a control beside it that the new rule still decides.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
from test_reproduce import run_main

from kbench.cli.app import main
from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.results.store import ResultStore
from kbench.studies import claims, published, reproduce
from kbench.studies.claims import FAILS, HOLDS, INCONCLUSIVE, ROUNDS_NEEDED, UNMEASURABLE
from kbench.studies.sweep import load_sweep

_ids = itertools.count()

NO_GPU = {
    "machine": {
        "hostname": "here",
        "cpu": {"model": "Test CPU"},
        "gpu": {"available": False, "devices": [], "reason": "NVML: no driver"},
    }
}
WITH_GPU = {
    "machine": {
        "hostname": "here",
        "gpu": {"available": True, "devices": [{"index": 0, "name": "Test GPU"}]},
    },
    "framework": {"memory_options": {"gpus_visible": 1}},
}
# the same machine, but the worker saw no GPU (keras-mxnet without CUDA, --device cpu)
GPU_UNSEEN = {**WITH_GPU, "framework": {"memory_options": {"gpus_visible": 0}}}
BUSY = {"flags": ["busy: 80% of the cores used by other processes"], "other_share": 0.8}

# run -> the document's settings (images_per_sec, status, environment, quality), or None
Documents = Callable[[Any], Optional[Dict[str, Any]]]


def planned(name: str, rounds: int = ROUNDS_NEEDED, reduced: bool = True):
    """A study and its sweep as ``kbench reproduce`` plans it: ``rounds`` rounds."""
    study, sweep = reproduce.prepare(name, reduced)
    return study, reproduce.with_rounds(sweep, rounds)


def document(sweep, run, ips: Optional[float], status: str = "ok", environment=None,
             quality: Optional[Dict[str, Any]] = None) -> RunResult:  # fmt: skip
    """A result document as the runner writes one for ``run`` of ``sweep``."""
    n = next(_ids)
    metrics: Dict[str, Any] = {"images_per_sec": ips, "memory": []}
    if quality:
        metrics["quality"] = quality
    return RunResult(
        run_id=f"v{n:05d}",
        status=status,
        config=run.config.to_dict(),
        started_at=f"2026-11-27T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
        wall_time_s=1.0,
        environment=environment or NO_GPU,
        data={"synthetic": run.config.dataset == "synthetic"},
        metrics=metrics if status == "ok" else {},
        reason=None if status == "ok" else "it broke",
        kind="inference" if run.config.mode == "inference" else "train",
        sweep=sweep.provenance(run),
    )


def store_of(tmp_path: Path, sweep, documents: Documents) -> Path:
    """A store holding a document for every run of ``sweep`` that ``documents`` gives."""
    store = ResultStore(tmp_path / "store")
    for run in sweep.runs:
        settings = documents(run)
        if settings is not None:
            store.add(document(sweep, run, **settings))
    return store.directory


def verdict(study, sweep, store: Path, claim_id: str) -> claims.ClaimOutcome:
    (found,) = [o for o in reproduce.verdicts(study, sweep, store) if o.claim.id == claim_id]
    return found


def wobble(run, centre: float, spread: float = 0.01) -> float:
    """A value near ``centre`` that differs a little from round to round."""
    return centre * (1 + spread * ((run.config.repeat % 3) - 1))


# Busy machine, one round -------------------------------------------------------------


def xla(ips_on: float, quality=None) -> Documents:
    def documents(run):
        if run.group != "jit-compile":
            return None
        ips = wobble(run, ips_on if run.config.jit_compile == "on" else 100.0)
        return {"ips": ips, "quality": quality}

    return documents


def test_busy_machine_one_round_is_inconclusive(tmp_path):
    # before: "[HOLDS] xla-speedup-near-1.15 ... x1.00 is within 0.15 of x1.15", from one
    # round with every run flagged busy at 80% of the cores
    study, sweep = planned("tf21-mxnet15-lenet", rounds=1)
    found = verdict(
        study, sweep, store_of(tmp_path, sweep, xla(100.0, BUSY)), "xla-speedup-near-1.15"
    )
    assert found.verdict == INCONCLUSIVE, found.reason
    assert "1 round" in found.reason and "busy: 80% of the cores" in found.reason
    assert found.evidence.rounds == 1 and found.evidence.flags
    assert found.evidence.size == "reduced"


def test_busy_machine_many_rounds_is_still_inconclusive_and_quiet_ones_decide(tmp_path):
    study, sweep = planned("tf21-mxnet15-lenet")
    busy = verdict(
        study, sweep, store_of(tmp_path / "a", sweep, xla(115.0, BUSY)), "xla-speedup-near-1.15"
    )
    assert busy.verdict == INCONCLUSIVE and "runs flagged" in busy.reason
    quiet = verdict(
        study, sweep, store_of(tmp_path / "b", sweep, xla(115.0)), "xla-speedup-near-1.15"
    )
    assert quiet.verdict == HOLDS, quiet.reason
    assert quiet.evidence.rounds == ROUNDS_NEEDED and not quiet.evidence.flags
    ((pair, interval),) = quiet.evidence.intervals
    assert interval.coverage >= 0.95 and 1.0 <= interval.low <= interval.high <= 1.3
    slower = verdict(
        study, sweep, store_of(tmp_path / "c", sweep, xla(60.0)), "xla-speedup-near-1.15"
    )
    assert slower.verdict == FAILS and "lies outside" in slower.reason


def test_busy_rounds_give_no_does_not_hold(tmp_path):
    # before: "lenet-cpu-mxnet-faster: does not hold (x0.01 with 84-93% of the cores busy)"
    study, sweep = planned("tf21-mxnet15-lenet", rounds=1)

    def documents(run):
        if run.group not in ("defaults", "hybridize"):
            return None
        return {"ips": 1.0 if run.config.backend == "mxnet-gluon" else 100.0, "quality": BUSY}

    found = verdict(study, sweep, store_of(tmp_path, sweep, documents), "lenet-cpu-mxnet-faster")
    assert found.verdict == INCONCLUSIVE and "x0.01" in found.reason


# Spread ignored -------------------------------------------------------------------------


def cnn(ratios: List[float]) -> Documents:
    def documents(run):
        if run.group != "fashion-mnist-cpu" or run.config.model != "small_cnn":
            return None
        if run.config.backend == "tensorflow":
            return {"ips": 100.0}
        if run.config.backend == "mxnet":
            return {"ips": 100.0 * ratios[run.config.repeat]}
        return None

    return documents


def test_a_wide_spread_is_inconclusive_whatever_the_median(tmp_path):
    # before: "cnn-cpu-mxnet-slower ... holds: x1.01 is within 0.15 of x0.87" with rounds
    # spanning x0.50-x1.60
    study, sweep = planned("keras-mxnet-laptop")
    wide = cnn([0.50, 0.95, 1.00, 1.02, 1.30, 1.60])
    found = verdict(study, sweep, store_of(tmp_path / "a", sweep, wide), "cnn-cpu-mxnet-slower")
    assert found.verdict == INCONCLUSIVE and "straddles" in found.reason
    assert "x1.01 [0.50-1.60" in found.reason
    narrow = cnn([0.86, 0.87, 0.88, 0.86, 0.87, 0.88])
    held = verdict(study, sweep, store_of(tmp_path / "b", sweep, narrow), "cnn-cpu-mxnet-slower")
    assert held.verdict == HOLDS and "lies inside x0.72-x1.02" in held.reason


# A side that never ran ------------------------------------------------------------------


def test_a_failed_side_of_one_model_makes_the_claim_inconclusive(tmp_path):
    # before: "MXNet trains ResNet-20 and VGG faster: holds at x1.01" with the VGG MXNet
    # run failed
    study, sweep = planned("mxnet-pytorch-resnet")

    def documents(run):
        if run.config.backend == "mxnet-gluon" and run.config.model == "vgg16":
            return {"ips": None, "status": "failed"}
        return {"ips": wobble(run, 150.0 if run.config.backend == "mxnet-gluon" else 100.0)}

    found = verdict(study, sweep, store_of(tmp_path, sweep, documents), "mxnet-trains-faster")
    assert found.verdict == INCONCLUSIVE, found.reason
    assert "model=vgg16: runs missing" in found.reason and "6 failed" in found.reason
    (resnet,) = [c for c in found.checks if c.label == "model=resnet20"]
    assert resnet.verdict == HOLDS  # the side that ran is still judged


def declarative(speeds: Dict[str, float], failed: str = "") -> Documents:
    def documents(run):
        if run.group != "vgg16-cifar10" or run.config.backend not in speeds:
            return None
        if run.config.backend == failed:
            return {"ips": None, "status": "failed"}
        return {"ips": wobble(run, speeds[run.config.backend] * run.config.threads)}

    return documents


def test_an_ordering_with_an_item_that_never_ran_is_inconclusive(tmp_path):
    # before: "PyTorch highest and MXNet the lowest: holds" with every MXNet run failed
    study, sweep = planned("declarative-e2e")
    speeds = {"mxnet": 10.0, "tensorflow": 20.0, "torch-native": 40.0}
    store = store_of(tmp_path / "a", sweep, declarative(speeds, failed="mxnet"))
    found = verdict(study, sweep, store, "vgg-inference-pytorch-first-mxnet-last")
    assert found.verdict == INCONCLUSIVE and "backend=mxnet (6 failed)" in found.reason
    ran = verdict(
        study, sweep, store_of(tmp_path / "b", sweep, declarative(speeds)),
        "vgg-inference-pytorch-first-mxnet-last",
    )  # fmt: skip
    assert ran.verdict == HOLDS, ran.reason


def test_an_ordering_item_the_sweep_never_runs_is_left_out_and_named(tmp_path):
    # the reduced sweep runs 1 and 2 threads: 4, 8 and 16 are named, not missing
    study, sweep = planned("declarative-e2e")
    store = store_of(tmp_path, sweep, declarative({"torch-native": 40.0}))
    found = verdict(study, sweep, store, "vgg-pytorch-gains-from-cores")
    assert found.verdict == HOLDS, found.reason
    assert "left out: threads=4, threads=8, threads=16" in found.reason


# A GPU claim judged with a CPU side -----------------------------------------------------


def resnet50(mxnet_environment) -> Documents:
    def documents(run):
        if run.group != "resnet50-synthetic" or run.config.batch_size != 32:
            return None
        if run.config.backend == "mxnet":
            return {"ips": wobble(run, 82.0), "environment": mxnet_environment}
        if run.config.backend == "tensorflow":
            return {"ips": 100.0, "environment": WITH_GPU}
        return None

    return documents


def test_a_gpu_claim_with_a_side_off_the_gpu_is_inconclusive(tmp_path):
    # before: "resnet50-b32-gpu-ratio does not hold: x0.05" where the MXNet run saw no
    # GPU (any run of the slice with a GPU passed the requirement)
    study, sweep = planned("keras-mxnet-laptop")
    store = store_of(tmp_path / "a", sweep, resnet50(GPU_UNSEEN))
    found = verdict(study, sweep, store, "resnet50-b32-gpu-ratio")
    assert found.verdict == INCONCLUSIVE, found.reason
    assert (
        "a side off the GPU: backend=mxnet (the machine has a GPU, but the worker" in found.reason
    )
    assert found.evidence.devices == ["CPU unknown CPU", "GPU Test GPU"]
    both = verdict(
        study, sweep, store_of(tmp_path / "b", sweep, resnet50(WITH_GPU)), "resnet50-b32-gpu-ratio"
    )
    assert both.verdict == HOLDS and both.evidence.devices == ["GPU Test GPU"]


# Two runs, one kept ---------------------------------------------------------------------


def toy_study(where: Dict[str, Any]) -> published.Study:
    return published.parse_study(
        {
            "name": "toy", "title": "t", "document": "d.txt", "source": "s",
            "hardware": {"cpu": "x"}, "versions": {"mxnet": "1"}, "sweep": "sweeps/x.yaml",
            "figures": [{"id": "f", "value": 1.5, "units": "X", "provenance": {"table": "T"}}],
            "claims": [{
                "id": "c", "kind": "ratio", "statement": "s", "quote": "q", "paper": 1.5,
                "tolerance": 0.5, "metric": "images_per_sec", "where": where,
                "numerator": {"backend": "tensorflow"}, "denominator": {"backend": "mxnet"},
            }],
        },
        "toy.yaml",
    )  # fmt: skip


def toy_result(backend: str, repeat: int, dataset: str, ips: float) -> RunResult:
    config = RunConfig.from_dict(
        {"backend": backend, "model": "lenet5", "dataset": dataset, "repeat": repeat}
    )
    n = next(_ids)
    return RunResult(
        run_id=f"t{n:05d}", status="ok", config=config.to_dict(),
        started_at=f"2026-11-28T10:{n // 60 % 60:02d}:{n % 60:02d}Z", wall_time_s=1.0,
        environment=NO_GPU, data={"synthetic": False},
        metrics={"images_per_sec": ips, "memory": []},
        sweep={"name": "toy", "file": "x.yaml", "reduced": False, "group": "g", "run_key": f"k{n}"},
    )  # fmt: skip


def test_two_runs_of_one_round_are_named_not_one_kept(tmp_path):
    # before: CIFAR-10 and CIFAR-100 runs of one round matched one side; the later one
    # silently replaced the earlier
    results = [
        toy_result(backend, repeat, dataset, ips)
        for repeat in range(ROUNDS_NEEDED)
        for backend, dataset, ips in (
            ("tensorflow", "cifar10", 150.0), ("mxnet", "cifar10", 100.0),
            ("tensorflow", "cifar100", 90.0), ("mxnet", "cifar100", 100.0),
        )
    ]  # fmt: skip
    store = ResultStore(tmp_path / "store")
    for r in results:
        store.add(r)
    stored = store.results(latest_only=True)
    (found,) = claims.evaluate(toy_study({}), stored)
    assert found.verdict == INCONCLUSIVE and "two runs of one round match one side" in found.reason
    first = [r for r in results if r.config["repeat"] == 0]
    assert f"{first[0].run_id}: dataset=cifar10" in found.reason
    assert f"{first[2].run_id}: dataset=cifar100" in found.reason
    (narrowed,) = claims.evaluate(toy_study({"dataset": "cifar10"}), stored)
    assert narrowed.verdict == HOLDS, narrowed.reason


def test_a_study_selector_that_matches_two_runs_of_a_round_is_refused(tmp_path):
    # the distributed study's claims named no dataset, while its sweep runs CIFAR-10 and
    # CIFAR-100 in every round: the file check now says so
    good = published.find_study("distributed-cpu-cluster")
    text = good.read_text().replace(
        "where: {workers: 3, dataset: cifar10}", "where: {workers: 3}", 1
    )
    (tmp_path / "studies").mkdir()
    (tmp_path / "sweeps").symlink_to(good.parent.parent / "sweeps")
    bad = tmp_path / "studies" / good.name
    bad.write_text(text)
    problems = reproduce.check_study(published.load_study(bad))
    assert problems and all("matches 2 runs of one round" in p for p in problems)
    assert "differ in dataset" in problems[0] and "Add the setting" in problems[0]


# Unlabelled: rounds, evidence, JSON, --repeats ----------------------------------------


def lenet_store(tmp_path: Path, rounds: int) -> Path:
    _, sweep = planned("tf21-mxnet15-lenet", rounds=rounds)
    return store_of(tmp_path, sweep, lambda run: {"ips": wobble(run, 100.0)})


def test_reproduce_prints_evidence_and_writes_claims_json(tmp_path):
    store = lenet_store(tmp_path, rounds=3)
    text = run_main(
        ["reproduce", "tf21-mxnet15-lenet", "--reduced", "--dry-run", "--repeats", "3",
         "--store", str(store)]
    )  # fmt: skip
    assert "36 runs, 36 already done" in text  # 12 runs x 3 rounds
    assert "[INCONCLUSIVE] xla-speedup-near-1.15" in text
    assert "evidence:     reduced size; CPU Test CPU" in text
    assert "3 rounds (a verdict needs 6)" in text and "75%, n=3]" in text
    assert "[HOLDS]" not in text and "[DOES NOT HOLD]" not in text
    assert "How these runs differ from the paper's (every claim): frameworks:" in text
    markdown = (store / "claims.md").read_text()
    assert "(reduced size)" in markdown and "| evidence |" in markdown
    assert "3 rounds (a verdict needs 6)" in markdown
    data = json.loads((store / "claims.json").read_text())
    assert data["size"] == "reduced" and data["rounds_needed"] == ROUNDS_NEEDED
    xla_claim = next(c for c in data["claims"] if c["id"] == "xla-speedup-near-1.15")
    assert xla_claim["verdict"] == "inconclusive" and xla_claim["evidence"]["rounds"] == 3
    (interval,) = xla_claim["evidence"]["intervals"]
    assert interval["coverage"] == pytest.approx(0.75) and interval["n"] == 3
    assert any("frameworks:" in d for d in xla_claim["evidence"]["deviations"])
    assert set(data["counts"]) == {HOLDS, FAILS, INCONCLUSIVE, UNMEASURABLE}


def test_reproduce_defaults_to_the_rounds_a_verdict_needs(tmp_path):
    store = lenet_store(tmp_path, rounds=ROUNDS_NEEDED)
    text = run_main(
        ["reproduce", "tf21-mxnet15-lenet", "--reduced", "--dry-run", "--store", str(store)]
    )
    assert f"{12 * ROUNDS_NEEDED} runs, {12 * ROUNDS_NEEDED} already done" in text
    # every round x1.00: outside LeNet's x1.23-x2.23, so decided from 6 quiet rounds
    assert "[DOES NOT HOLD] lenet-cpu-mxnet-faster" in text
    assert "6 rounds (a verdict needs 6)" in text and "97%, n=6]" in text


def test_the_report_labels_size_and_evidence(tmp_path):
    from kbench.studies.reproduce import paper_section

    store = lenet_store(tmp_path, rounds=2)
    section = paper_section(ResultStore(store).results(latest_only=True))
    (table,) = section.tables
    assert "reduced" in section.intro and "(reduced size)" in table.title
    assert table.headers[-1] == "evidence"
    assert all(
        "2 rounds (a verdict needs 6)" in row[-1] for row in table.rows if "round" in row[-1]
    )


def test_repeats_keep_the_file_rounds_keys_and_precision_passes_through():
    study, _ = reproduce.prepare("tf21-mxnet15-lenet", False)
    file_sweep = load_sweep(study.sweep_path())  # full size: 5 repeats
    assert reproduce.file_rounds(file_sweep) == 5 and reproduce.default_rounds(file_sweep) == 6
    more = reproduce.with_rounds(file_sweep, 7)
    assert [r.key for r in more.runs[: len(file_sweep.runs)]] == [r.key for r in file_sweep.runs]
    assert len(more.runs) == len(file_sweep.runs) // 5 * 7
    precise, kept = reproduce.with_precision(more, 0.02, 60.0)
    assert not kept and all(r.config.target_precision == 0.02 for r in precise.runs)
    assert {r.key for r in precise.runs}.isdisjoint(r.key for r in more.runs)
    _, distributed = reproduce.prepare("distributed-cpu-cluster", True)
    same, kept = reproduce.with_precision(distributed, 0.02, None)
    assert len(kept) == len(distributed.runs)  # data-parallel runs: fixed steps
    assert [r.key for r in same.runs] == [r.key for r in distributed.runs]
    with pytest.raises(Exception, match="positive number of rounds"):
        reproduce.with_rounds(file_sweep, 0)


def test_ratio_precision_needs_the_rounds_an_interval_needs(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["reproduce", "tf21-mxnet15-lenet", "--reduced", "--repeats", "3",
              "--ratio-precision", "0.05", "--store", str(tmp_path / "s")])  # fmt: skip
    assert caught.value.code == 2
    assert "--ratio-precision: expected --repeats of at least 6" in capsys.readouterr().err


# study files and --store (issue 30, cases 7 and 10) ----------------------------------


def study_copy(tmp_path: Path, change: Callable[[str], str]) -> Path:
    good = published.find_study("tf21-mxnet15-lenet")
    (tmp_path / "studies").mkdir(exist_ok=True)
    if not (tmp_path / "sweeps").exists():
        (tmp_path / "sweeps").symlink_to(good.parent.parent / "sweeps")
    path = tmp_path / "studies" / "bad.yaml"
    path.write_text(change(good.read_text()))
    return path


def refused(path: Path, capsys) -> str:
    code = main(["reproduce", str(path), "--dry-run"])
    captured = capsys.readouterr()
    assert code == 2, captured.out
    assert "Traceback" not in captured.err + captured.out
    return captured.err


def test_plots_not_a_list_is_refused_with_exit_2(tmp_path, capsys):
    # before: TypeError: 'int' object is not iterable
    path = study_copy(tmp_path, lambda text: text + "plots: 5\n")
    message = refused(path, capsys)
    assert "plots: expected a list of plots" in message and "received int 5" in message


def test_yaml_nested_100000_deep_is_refused_with_exit_2(tmp_path, capsys):
    # before: RecursionError, a traceback
    path = study_copy(tmp_path, lambda text: text + "note2: " + "[" * 100_000 + "]" * 100_000)
    message = refused(path, capsys)
    assert "nested too deep" in message


def test_nesting_past_the_limit_is_refused_where_yaml_reads_it(tmp_path):
    deep: Any = "x"
    for _ in range(40):
        deep = [deep]
    with pytest.raises(published.StudyError, match="nested at most 32 deep"):
        published.parse_study({"name": "toy", "hardware": {"cpu": deep}}, "toy.yaml")


@pytest.mark.parametrize("value", ["-1", ".nan", "0", ".inf"])
def test_a_tolerance_that_is_no_positive_finite_number_is_refused(tmp_path, value):
    # before: tolerance: -1 and tolerance: .nan were accepted
    path = study_copy(
        tmp_path, lambda text: text.replace("tolerance: 0.5", f"tolerance: {value}", 1)
    )
    with pytest.raises(published.StudyError) as caught:
        published.load_study(path)
    assert caught.value.where == "claims[0].tolerance"
    assert "a finite number above 0" in caught.value.message


def test_store_that_is_a_file_is_named_a_file(tmp_path, capsys):
    # before: "store: expected a directory of kbench results; FILE does not exist", after
    # printing the plan
    file = tmp_path / "afile"
    file.write_text("x")
    with pytest.raises(SystemExit) as caught:
        main(["reproduce", "tf21-mxnet15-lenet", "--reduced", "--dry-run", "--store", str(file)])
    assert caught.value.code == 2
    captured = capsys.readouterr()
    assert "which is a file, not a folder" in captured.err and "does not exist" not in captured.err
    assert "sweep tf21" not in captured.out  # refused before the plan
