"""Published studies as data (studies/*.yaml), their claims as checks, kbench reproduce.

The study files are checked against their sweeps; each kind of claim is evaluated on
small result sets written into a real store with kbench's own writers (RunResult,
ResultStore), for holds / does not hold / inconclusive / not measurable here (a verdict
needs ROUNDS_NEEDED rounds: the tests write that many); the CLI and the report read such
a store. tests/test_verdicts.py holds the cases where a verdict must say inconclusive.
No framework runs here: `kbench reproduce STUDY --reduced` end to end takes minutes
(see docs/guides/reproduce.md for the measured runs).
"""

from __future__ import annotations

import contextlib
import io
import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from kbench.cli.app import main
from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.results.store import ResultStore
from kbench.studies import claims, published, reproduce
from kbench.studies.claims import FAILS, HOLDS, INCONCLUSIVE, ROUNDS_NEEDED, UNMEASURABLE

STUDY_FILES = published.study_files()
_ids = itertools.count()

NO_GPU = {
    "machine": {
        "hostname": "here",
        "gpu": {"available": False, "devices": [], "reason": "NVML: no driver"},
    }
}
WITH_GPU = {
    "machine": {"hostname": "here", "gpu": {"available": True, "devices": [{"index": 0}]}},
    "framework": {"memory_options": {"gpus_visible": 1}},
}


def result(
    backend: str,
    repeat: int,
    ips: Optional[float],
    *,
    sweep: str = "toy",
    group: str = "g",
    status: str = "ok",
    reduced: bool = False,
    synthetic: bool = False,
    environment: Optional[Dict[str, Any]] = None,
    metrics: Optional[Dict[str, Any]] = None,
    sampler: Optional[Dict[str, Any]] = None,
    **settings: Any,
) -> RunResult:
    """A result document as the runner writes one, its config built by RunConfig."""
    settings = {"model": "mlp", "dataset": "synthetic", "batch_size": 32, **settings}
    config = RunConfig.from_dict({"backend": backend, "repeat": repeat, **settings}).to_dict()
    n = next(_ids)
    return RunResult(
        run_id=f"r{n:04d}",
        status=status,
        config=config,
        started_at=f"2026-11-26T10:{n // 60:02d}:{n % 60:02d}Z",
        wall_time_s=1.0,
        environment=environment or NO_GPU,
        data={"synthetic": synthetic},
        metrics={"images_per_sec": ips, "memory": [], **(metrics or {})} if status == "ok" else {},
        reason=None if status == "ok" else "it broke",
        sampler=sampler,
        sweep={
            "name": sweep,
            "file": "x.yaml",
            "reduced": reduced,
            "group": group,
            "run_key": f"k{n}",
        },
    )


def rounds(backend: str, values: List[float], **kwargs: Any) -> List[RunResult]:
    """One result per round (repeat 0, 1, ...) of ``backend``, with those img/s."""
    return [result(backend, repeat, ips, **kwargs) for repeat, ips in enumerate(values)]


def stored(tmp_path: Path, results: List[RunResult]) -> List[RunResult]:
    """Write ``results`` into a store and read them back, as reproduce and report do."""
    store = ResultStore(tmp_path / "store")
    for r in results:
        store.add(r)
    return store.results(latest_only=True)


def study(claim: Dict[str, Any], figures: Optional[List[Dict[str, Any]]] = None) -> published.Study:
    document = {
        "name": "toy",
        "title": "A toy study",
        "document": "toy.txt",
        "source": "tests",
        "hardware": {"gpu": "GTX 1060"},
        "versions": {"mxnet": "1.4.0"},
        "sweep": "sweeps/x.yaml",
        "figures": figures
        or [
            {
                "id": "f1",
                "value": 0.71,
                "units": "%",
                "as_published": "71%",
                "provenance": {"table": "Table 4", "row": "MLP", "column": "ratio"},
            }
        ],
        "claims": [
            {"id": "c", "statement": "s", "quote": "q", "metric": "images_per_sec", **claim}
        ],
    }
    return published.parse_study(document, "toy.yaml")


def outcome(study_: published.Study, results: List[RunResult]) -> claims.ClaimOutcome:
    (found,) = claims.evaluate(study_, results)
    return found


RATIO = {
    "kind": "ratio",
    "paper": 0.71,
    "tolerance": 0.15,
    "figures": ["f1"],
    "numerator": {"backend": "mxnet"},
    "denominator": {"backend": "tensorflow"},
}


# the data files ------------------------------------------------------------------


def test_there_is_a_study_file_per_seed_document():
    documents = {published.load_study(p).document for p in STUDY_FILES}
    assert documents == {
        f"00{i}_{h}.txt"
        for i, h in enumerate(
            [
                "7d69d32655156ec3",
                "4e2b77e98b5e905e",
                "96fbb6cf8d72fb30",
                "9a8b24fde4561747",
                "385fe6e9e41468ee",
            ]
        )
    } | {"templates/getting_started/benchmarks.md (keras-team/keras-io)"}  # the sixth: a page


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.stem)
def test_study_file_loads_and_fits_its_sweep(path):
    found = published.load_study(path)
    assert found.name == path.stem
    assert found.figures and found.claims and found.hardware and found.versions
    for figure in found.figures.values():
        assert figure.units.strip()
        assert figure.provenance.table or figure.provenance.figure or figure.provenance.section
        assert figure.value is not None or figure.as_published
        assert not figure.read_off_plot or figure.precision is not None
    for claim in found.claims:
        assert claim.quote.strip()
        assert claim.kind != "ratio" or claim.target is not None
        assert not claim.doubt or claim.instead
    assert reproduce.check_study(found) == []


def test_a_selector_the_sweep_lacks_is_named_with_the_fix(tmp_path):
    good = STUDY_FILES[0]
    text = good.read_text().replace("group: mlp-mnist", "group: mlp-mnistt", 1)
    (tmp_path / "studies").mkdir()
    (tmp_path / "sweeps").symlink_to(good.parent.parent / "sweeps")
    bad = tmp_path / "studies" / good.name
    bad.write_text(text)
    problems = reproduce.check_study(published.load_study(bad))
    assert problems and "mlp-mnistt" in problems[0] and "Fix the selector" in problems[0]


@pytest.mark.parametrize(
    "change, where, words",
    [
        (
            {"figures": [{"id": "f1", "value": 3, "units": "s", "provenance": {}}]},
            "figures[0].provenance",
            "table, figure or section",
        ),
        (
            {"figures": [{"id": "f1", "value": 3, "provenance": {"table": "T1"}}]},
            "figures[0].units",
            "units exactly as published",
        ),
        (
            {
                "figures": [
                    {
                        "id": "f1",
                        "value": 7800,
                        "units": "img/s",
                        "read_off_plot": True,
                        "provenance": {"figure": "Fig 4.4"},
                    }
                ]
            },
            "figures[0].precision",
            "precision",
        ),
        (
            {
                "claims": [
                    {
                        "id": "c",
                        "kind": "ratio",
                        "statement": "s",
                        "quote": "q",
                        "metric": "images_per_sec",
                        "numerator": {"backend": "mxnet"},
                        "denominator": {"backend": "tensorflow"},
                        "tolerance": 0.1,
                    }
                ]
            },
            "claims[0].expected",
            "without the paper's ratio",
        ),
        (
            {
                "claims": [
                    {
                        "id": "c",
                        "kind": "sign",
                        "statement": "s",
                        "quote": "q",
                        "metric": "images_per_sec",
                        "numerator": {"backend": "mxnet"},
                        "denominator": {"backend": "tensorflow"},
                        "doubt": "unclear",
                    }
                ]
            },
            "claims[0].instead",
            "sound measurement",
        ),
    ],
)
def test_errors_name_the_file_the_place_and_the_fix(change, where, words):
    document = {
        "name": "toy",
        "title": "t",
        "document": "d.txt",
        "source": "s",
        "hardware": {"gpu": "x"},
        "versions": {"mxnet": "1"},
        "sweep": "sweeps/x.yaml",
        "figures": [{"id": "f1", "value": 1, "units": "s", "provenance": {"table": "T"}}],
        "claims": [
            {
                "id": "c",
                "kind": "sign",
                "statement": "s",
                "quote": "q",
                "metric": "images_per_sec",
                "numerator": {"backend": "a"},
                "denominator": {"backend": "b"},
            }
        ],
        **change,
    }
    with pytest.raises(published.StudyError) as caught:
        published.parse_study(document, "toy.yaml")
    assert caught.value.file == "toy.yaml" and caught.value.where == where
    assert words in caught.value.message


def test_studies_are_found_where_pip_installs_them(tmp_path, monkeypatch):
    # pip install . copies studies/ and sweeps/ to <prefix>/share/kbench (setup.cfg
    # data_files); KBENCH_STUDIES_DIR points at such a copy as the prefix lookup would.
    share = tmp_path / "share" / "kbench"
    for folder in ("studies", "sweeps"):
        (share / folder).mkdir(parents=True)
        for path in (STUDY_FILES[0].parent.parent / folder).glob("*.yaml"):
            (share / folder / path.name).write_text(path.read_text())
    monkeypatch.setenv(published.STUDIES_ENV, str(share / "studies"))
    found = published.load_study(published.find_study("mxnet-pytorch-resnet"))
    assert found.sweep_path() == share / "sweeps" / "mxnet_pytorch_resnet.yaml"
    assert reproduce.check_study(found) == []
    with pytest.raises(published.StudyError, match="Did you mean 'mxnet-pytorch-resnet'"):
        published.find_study("mxnet-pytorch-resnt")


# each kind of claim ---------------------------------------------------------------


def test_ratio_holds_on_the_interval_of_per_round_ratios(tmp_path):
    # rounds 1 and 4 ran on a machine slowed twice over: the ratio is the same
    runs = stored(
        tmp_path,
        rounds("mxnet", [75, 37.5, 80, 75, 37.5, 74])
        + rounds("tensorflow", [100, 50, 100, 100, 50, 100]),
    )
    found = outcome(study(RATIO), runs)
    assert found.verdict == HOLDS, found.reason
    assert "x0.75" in found.here and "lies inside x0.56-x0.86 (x0.71 +- 0.15)" in found.reason
    assert "x0.75 [0.74-0.80, 97%, n=6]" in found.reason
    assert "x0.71" in found.paper and "71% (Table 4" in found.paper


def test_ratio_does_not_hold_outside_its_tolerance(tmp_path):
    runs = stored(
        tmp_path / "a",
        rounds("mxnet", [120, 121, 119, 120, 122, 118]) + rounds("tensorflow", [100] * 6),
    )
    found = outcome(study(RATIO), runs)
    assert found.verdict == FAILS
    assert "x1.20 [1.18-1.22, 97%, n=6] lies outside x0.56-x0.86" in found.reason
    # one round, flagged: no verdict, and both reasons given
    busy = {"quality": {"flags": ["busy: 90% of the cores used by other processes"]}}
    runs = stored(
        tmp_path / "b", [result("mxnet", 0, 120, metrics=busy), result("tensorflow", 0, 100)]
    )
    found = outcome(study(RATIO), runs)
    assert found.verdict == INCONCLUSIVE
    assert "1 run: no spread" in found.here
    assert "1 round: no interval; a 95% interval needs 6 rounds" in found.reason
    assert "backend=mxnet: busy: 90% of the cores used by other processes" in found.reason


def test_runs_missing_or_failed_are_inconclusive(tmp_path):
    runs = stored(
        tmp_path, [result("mxnet", 0, None, status="failed"), result("tensorflow", 0, 100)]
    )
    found = outcome(study(RATIO), runs)
    assert found.verdict == INCONCLUSIVE
    assert "runs missing" in found.reason and "1 failed" in found.reason
    assert outcome(study(RATIO), []).verdict == INCONCLUSIVE


def test_sign_per_value_of_for_each(tmp_path):
    claim = {
        "kind": "sign",
        "numerator": {"hybridize": True},
        "denominator": {"hybridize": False},
        "expect": "greater",
        "for_each": "model",
    }
    gluon = {"backend": "mxnet-gluon", "dataset": "synthetic"}
    fast = [
        result(repeat=r, ips=ips * (1 + r / 100), model="resnet20", hybridize=h, **gluon)
        for r in range(ROUNDS_NEEDED)
        for h, ips in ((True, 200), (False, 100))
    ]
    slow = [
        result(repeat=r, ips=ips, model="vgg16", hybridize=h, **gluon)
        for r in range(ROUNDS_NEEDED)
        for h, ips in ((True, 90), (False, 100))
    ]
    held = outcome(study(claim), stored(tmp_path / "a", fast))
    assert held.verdict == HOLDS and "model=resnet20" in held.here and "x2.00" in held.here
    both = outcome(study(claim), stored(tmp_path / "b", fast + slow))
    assert (
        both.verdict == FAILS
        and "model=vgg16: x0.90 [0.90-0.90, 97%, n=6] lies at or below x1" in both.reason
    )


def test_ordering_and_efficiency_ordering(tmp_path):
    ordering = {
        "kind": "ordering",
        "items": [{"batch_size": 16}, {"batch_size": 32}],
        "direction": "increasing",
        "for_each": "backend",
    }
    six = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0]  # each round's speed, a little apart

    def each(backend, ips, batch_size):
        return rounds(backend, [ips * f for f in six], batch_size=batch_size)

    runs = each("jax", 10, 16) + each("jax", 30, 32) + each("torch", 20, 16) + each("torch", 25, 32)
    assert outcome(study(ordering), stored(tmp_path / "a", runs)).verdict == HOLDS
    runs += each("mxnet", 40, 16) + each("mxnet", 30, 32)
    found = outcome(study(ordering), stored(tmp_path / "b", runs))
    assert found.verdict == FAILS and "backend=mxnet" in found.reason

    efficiency = {
        "kind": "efficiency_ordering",
        "metric": "scaling_efficiency",
        "items": [{"distributed": "tf-multiworker"}, {"distributed": "mxnet-sync"}],
        "direction": "increasing",
    }

    def dist(backend, mode, eff):
        return [
            result(
                backend,
                repeat,
                100,
                distributed=mode,
                workers=2,
                metrics={"distributed": {"scaling": {"efficiency": eff * six[repeat]}}},
            )
            for repeat in range(ROUNDS_NEEDED)
        ]

    ok = outcome(
        study(efficiency),
        stored(
            tmp_path / "c",
            dist("tensorflow", "tf-multiworker", 0.5) + dist("mxnet", "mxnet-sync", 0.8),
        ),
    )
    assert ok.verdict == HOLDS and "0.50" in ok.here and "0.80" in ok.here
    bad = outcome(
        study(efficiency),
        stored(
            tmp_path / "d",
            dist("tensorflow", "tf-multiworker", 0.9) + dist("mxnet", "mxnet-sync", 0.8),
        ),
    )
    assert bad.verdict == FAILS


def test_not_measurable_without_gpu_real_data_or_at_reduced_size(tmp_path):
    pair = [result("mxnet", 0, 75), result("tensorflow", 0, 100)]
    found = outcome(study({**RATIO, "requires": ["gpu"]}), stored(tmp_path / "a", pair))
    assert found.verdict == UNMEASURABLE and found.reason.startswith("no GPU")
    synthetic = [
        result("mxnet", 0, 75, synthetic=True),
        result("tensorflow", 0, 100, synthetic=True),
    ]
    found = outcome(study({**RATIO, "requires": ["real_data"]}), stored(tmp_path / "b", synthetic))
    assert found.verdict == UNMEASURABLE and "data not available offline" in found.reason
    small = [result("mxnet", 0, 75, reduced=True), result("tensorflow", 0, 100, reduced=True)]
    found = outcome(
        study({**RATIO, "reduced": "64x64 images are not the question"}),
        stored(tmp_path / "c", small),
    )
    assert found.verdict == UNMEASURABLE and "reduced size changes the question" in found.reason
    assert "x0.75" in found.here  # the numbers are still shown


def test_a_doubtful_measurement_is_checked_the_sound_way_on_a_gpu(tmp_path):
    claim = {
        "kind": "ratio",
        "expected": 0.05,
        "tolerance": 0.05,
        "requires": ["gpu"],
        "metric": "gpu_kernel_time_percent",
        "numerator": {"backend": "mxnet"},
        "denominator": {"backend": "tensorflow"},
        "doubt": "read how?",
        "instead": "NVML kernel-time fractions",
    }

    def busy(percent):
        return {"summary": {"measured": {"gpu0_kernel_time_percent": {"mean": percent}}}}

    runs = [
        result(backend, repeat, 80, environment=WITH_GPU, sampler=busy(percent + repeat))
        for repeat in range(ROUNDS_NEEDED)
        for backend, percent in (("mxnet", 70), ("tensorflow", 88))
    ]
    found = outcome(study(claim), stored(tmp_path, runs))
    assert found.verdict == FAILS and "x0.80" in found.here
    text = claims.claims_text(study(claim), [found])
    assert "doubt:        read how?" in text and "checked:      NVML" in text


# the command and the report --------------------------------------------------------


def run_main(args: List[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    assert code == 0, out.getvalue()
    return out.getvalue()


def test_reproduce_list_shows_every_study_and_claim():
    text = run_main(["reproduce", "--list"])
    for path in STUDY_FILES:
        found = published.load_study(path)
        assert found.name in text and found.sweep in text
        for claim in found.claims:
            assert claim.id in text


def laptop_store(tmp_path: Path) -> Path:
    """ResNet-50 runs of the study's reduced sweep (its own run keys), MXNet and
    TensorFlow, in as many rounds as a verdict needs."""
    _, sweep = reproduce.prepare("keras-mxnet-laptop", True)
    sweep = reproduce.with_rounds(sweep, ROUNDS_NEEDED)
    speeds = {(16, "mxnet"): 10, (32, "mxnet"): 30, (16, "tensorflow"): 12, (32, "tensorflow"): 40}
    store = ResultStore(tmp_path / "laptop")
    for run in sweep.runs:
        ips = speeds.get((run.config.batch_size, run.config.backend))
        if run.group != "resnet50-synthetic" or ips is None:
            continue
        settings = {k: v for k, v in run.config.to_dict().items() if k not in ("backend", "repeat")}
        done = result(run.config.backend, run.config.repeat, ips + run.config.repeat, **settings)
        store.add(replace(done, sweep=sweep.provenance(run)))
    return store.directory


def test_reproduce_no_run_prints_verdicts_from_the_store(tmp_path):
    store = laptop_store(tmp_path)
    text = run_main(
        ["reproduce", "keras-mxnet-laptop", "--reduced", "--dry-run", "--fresh-processes",
         "--store", str(store)]
    )  # fmt: skip
    assert "[NOT MEASURABLE HERE] smaller-batches-slower" in text  # a GPU finding, no GPU
    assert "[NOT MEASURABLE HERE] resnet50-b32-gpu-ratio" in text and "no GPU" in text
    assert "[INCONCLUSIVE] mlp-cpu-mxnet-slower" in text and "runs missing" in text
    assert "Intel Core i7-8750H" in text  # the paper's machine, for context
    assert "| smaller-batches-slower |" in (store / "claims.md").read_text()
    assert "already done, " in text and f"results in {store}/" in text  # the plan, first


def test_report_of_a_study_store_has_paper_vs_this_machine(tmp_path):
    from kbench.studies.reproduce import paper_section
    from kbench.views.report import write_report

    store = laptop_store(tmp_path)
    results = ResultStore(store).results(latest_only=True)
    assert paper_section([r for r in results if not r.sweep]) is None  # no study's runs
    summary = write_report(results, tmp_path / "report.html", sections=[paper_section(results)])
    page = (tmp_path / "report.html").read_text()
    assert 'id="paper"' in page and "Paper vs this machine" in page
    assert "smaller-batches-slower" in page and "GTX 1060" in page
    assert (
        "Paper vs this machine: ResNet-50, synthetic data - img/s against batch size (Table 5)"
        in summary.figures
    )
    assert any("ResNet on CIFAR-10" in s and "no finished run" in s for s in summary.skipped)
    # `kbench report` adds the section itself
    run_main(["report", "--store", str(store), "--output", str(tmp_path / "cli.html")])
    assert 'id="paper"' in (tmp_path / "cli.html").read_text()
