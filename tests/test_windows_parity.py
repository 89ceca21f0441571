"""Parity at warm-up in a warm windows comparison (issue 33): the baseline's worker exports
its initial weights, the others start from them, and each worker's outputs before training
and warmup losses are compared with the baseline's (kbench.run.agreement, kbench parity's
tolerance); every window records ``metrics.parity`` and ``kbench run`` says it per backend.

Pure: no framework starts here. The framework run is the slow test
``test_run_with_several_backends_measures_windows_and_says_how_it_stopped`` in
tests/test_windows.py (jax and mxnet: a running-mean loss against per-step ones), which
asserts the parity section of every window and the printed line.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kbench.cli import app
from kbench.results.comparison import comparison_metrics, window_record
from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.run import agreement
from kbench.run.runner import Case, PlannedRun
from kbench.run.trainer import Trainer
from kbench.run.windows import NOT_ASKED, WindowWorker, plan_parity, record_parity
from kbench.run.worker import warm_up
from kbench.studies import parity
from kbench.views.windows import parity_line, windows_table

USER_MODEL = Path(__file__).resolve().parent / "user_models" / "residual.py"
OUTPUTS = [[0.1, 0.2, 0.7], [0.3, 0.3, 0.4]]
STEP_LOSSES = [2.0, 1.0, 0.5]  # each step's own loss
RUNNING_MEANS = [2.0, 1.5, 3.5 / 3]  # what Keras 3's fit logs after each of those steps


def worker(backend: str, **settings) -> WindowWorker:
    config = RunConfig(backend=backend, model=settings.pop("model", "small_cnn"), **settings)
    return WindowWorker(
        runner=None, planned=PlannedRun(Case(config, None), f"{backend}-run", Path(".")),
        worker=None, context=None,
    )  # fmt: skip


def test_a_running_mean_loss_is_compared_step_by_step_with_a_native_ports():
    """Keras 3's fit logs the epoch's mean so far; torch-native logs each step's own.
    Compared raw, step 2 would be 50% apart; step by step they are the same."""
    assert agreement.step_losses(RUNNING_MEANS, running_mean=True) == pytest.approx(STEP_LOSSES)
    assert agreement.step_losses(STEP_LOSSES, running_mean=False) == STEP_LOSSES
    jax = {"outputs": OUTPUTS, "losses": RUNNING_MEANS}
    native = {"outputs": np.add(OUTPUTS, 3e-8).tolist(), "losses": STEP_LOSSES}
    record = agreement.same_start("jax", jax, "torch-native", native)
    assert record["checked"] and record["same_computation"], record
    assert record["output_max_abs"] == pytest.approx(3e-8) and record["loss_max_rel"] < 1e-12
    assert (record["rows"], record["steps"], record["differs"]) == (2, 3, None)
    assert record["tolerance"] == {"output_atol": 1e-4, "loss_rtol": 1e-2}
    assert not record["is_reference"]
    mxnet = {"outputs": OUTPUTS, "losses": STEP_LOSSES}  # Keras 2.2 logs each step's loss
    assert agreement.same_start("jax", jax, "mxnet", mxnet)["same_computation"]
    assert not agreement.same_start("jax", jax, "torch", mxnet)["same_computation"]


def test_what_differs_is_said_and_what_could_not_be_checked_says_why():
    jax = {"outputs": OUTPUTS, "losses": RUNNING_MEANS}
    off = {"outputs": np.add(OUTPUTS, 0.02).tolist(), "losses": [2.0, 1.1, 0.5]}
    record = agreement.same_start("jax", jax, "torch-native", off)
    assert record["checked"] and not record["same_computation"]
    assert "outputs before training differ by up to 0.02 (tolerance 0.0001)" in record["differs"]
    assert "a training step's loss differs by up to 10.00% of the reference's" in record["differs"]
    shapes = agreement.same_start("jax", jax, "torch", {"outputs": [[1.0]], "losses": [2.0]})
    assert not shapes["same_computation"] and "do not match the reference's" in shapes["differs"]
    failed = {"error": "ValueError: weights: layer dense is Dense with shapes [(4, 3)]"}
    record = agreement.same_start("jax", jax, "mxnet", failed)
    assert record == {
        "checked": False, "reference": "jax",
        "why": f"mxnet's check at warm-up could not be made: {failed['error']}",
    }  # fmt: skip
    record = agreement.same_start("jax", None, "torch", jax)
    assert not record["checked"] and record["why"].startswith("the reference's check")


def test_parity_compares_runs_with_the_same_function_and_its_noise_floor():
    """kbench parity's compare is the shared one, with the reference's noise floor."""

    def result(backend, outputs, losses, **more):
        return RunResult(
            run_id=backend, status="ok", config={"backend": backend}, started_at="t",
            wall_time_s=1.0, environment={}, data={},
            metrics={"outputs": outputs, "losses": losses, **more},
        )  # fmt: skip

    reference = result("tensorflow", OUTPUTS, STEP_LOSSES, noise_losses=[2.0, 1.04, 0.5])
    drifted = result("jax", OUTPUTS, [2.0, 1.2, 0.5])  # 20%: within 10 x the 4% floor
    found = parity.compare(reference, drifted, parity.Tolerance())
    assert found["passed"] and found["noise_floor"] == pytest.approx(0.04)
    floor = parity.noise_floor(reference)
    shared = agreement.differences(
        OUTPUTS, OUTPUTS, STEP_LOSSES, [2.0, 1.2, 0.5], parity.Tolerance(), floor
    )
    assert (
        found == shared
        and not agreement.differences(
            OUTPUTS, OUTPUTS, STEP_LOSSES, [2.0, 1.2, 0.5], parity.Tolerance()
        )["passed"]
    )
    with pytest.raises(ValueError, match="^jax: outputs"):
        parity.compare(reference, result("jax", OUTPUTS, [2.0]), parity.Tolerance())


def test_the_first_keras_backend_exports_and_every_other_worker_loads(tmp_path):
    """The baseline torch-native cannot export: jax does, warms up first, and the others
    (the baseline included) start from its weights; a worker whose settings compute
    otherwise is not checked, and says why."""
    workers = [worker("torch-native"), worker("jax"), worker("torch"),
               worker("tensorflow", learning_rate=0.1)]  # fmt: skip
    weights = tmp_path / "initial-weights.npz"
    order = plan_parity(workers, weights)
    assert [w.name for w in order] == ["jax", "torch-native", "torch", "tensorflow"]
    assert workers[1].weights == {"weights_out": str(weights), "check_optional": True}
    for loader in (workers[0], workers[2]):
        assert loader.weights == {"weights_in": str(weights), "check_optional": True}
        assert loader.check_rows == 64 and "parity" not in loader.tags
    assert workers[3].weights == {}
    assert workers[3].tags["parity"] == {
        "checked": False, "reference": "torch-native",
        "why": "its settings differ from torch-native's in learning_rate",
    }  # fmt: skip


@pytest.mark.parametrize(
    "backends, settings, check, why",
    [
        (("jax", "torch"), {}, False, NOT_ASKED),
        (("jax", "torch"), {"model": f"{USER_MODEL}:build"}, True, "a user model: kbench can"),
        (("jax", "torch"), {"mixed_precision": "bfloat16"}, True, "mixed precision bfloat16"),
        (("torch-native", "mxnet-gluon"), {}, True, "no backend here exports initial weights"),
    ],
)
def test_a_comparison_that_cannot_be_checked_records_why_in_every_worker(
    tmp_path, backends, settings, check, why
):
    workers = [worker(b, **settings) for b in backends]
    assert plan_parity(workers, tmp_path / "w.npz", check) == workers
    for w in workers:
        assert w.weights == {} and not w.tags["parity"]["checked"]
        assert w.tags["parity"]["why"].startswith(why), w.tags["parity"]


def test_after_warm_up_each_worker_carries_its_record_into_its_windows(tmp_path):
    workers = [worker("jax"), worker("torch-native"), worker("torch")]
    plan_parity(workers, tmp_path / "absent.npz")
    workers[0].ready = {"check": {"outputs": OUTPUTS, "losses": RUNNING_MEANS}}
    workers[1].ready = {"check": {"outputs": np.add(OUTPUTS, 0.5).tolist(), "losses": STEP_LOSSES}}
    # torch's worker failed its warm-up: no ready reply, no windows, no record
    record_parity(workers, tmp_path / "absent.npz")
    reference = workers[0].tags["parity"]
    assert reference["is_reference"] and reference["same_computation"]
    assert reference["output_max_abs"] == 0.0
    assert not workers[1].tags["parity"]["same_computation"]
    assert "parity" not in workers[2].tags


def document(backend, parity_record, rounds=2, ips=100.0):
    """A comparison's document of ``backend`` (the real builder), ``rounds`` windows."""
    records = []
    for r in range(rounds):
        metrics = {"images_per_sec": ips, "measured_images": 100, "measured_time_s": 1.0,
                   "step_times_s": [0.1] * 10}  # fmt: skip
        records.append(window_record(r, r, 0, metrics, 0.0, 1.0))
    facts = {"steps": 10, "window_s": 1.0, "batch_size": 10, "worker_pid": 1}
    return RunResult(
        run_id=backend, status="ok",
        config={"backend": backend, "model": "small_cnn", "repeat": 0, "window_s": 1.0},
        started_at="t", wall_time_s=1.0, environment={}, data={},
        metrics=comparison_metrics(records, {}, facts, {"parity": parity_record}),
    )  # fmt: skip


def test_the_comparison_says_per_backend_whether_it_computed_as_the_baseline():
    jax = {"outputs": OUTPUTS, "losses": RUNNING_MEANS}
    close = {"outputs": np.add(OUTPUTS, 6e-8).tolist(), "losses": RUNNING_MEANS}
    far = {"outputs": np.add(OUTPUTS, 0.3).tolist(), "losses": STEP_LOSSES}
    records = {
        "jax": agreement.same_start("jax", jax, "jax", jax),
        "torch": agreement.same_start("jax", jax, "torch", close),
        "torch-native": agreement.same_start("jax", jax, "torch-native", far),
        "mxnet": agreement.unchecked("jax", "mxnet's check at warm-up could not be made: X"),
    }
    text = windows_table([document(b, r) for b, r in records.items()])
    rows = {line.split()[1]: line.rstrip() for line in text.splitlines()[2:6]}
    for backend, word in (("jax", "reference"), ("torch", "same"),
                          ("torch-native", "DIFFERS"), ("mxnet", "not checked")):  # fmt: skip
        assert rows[backend].endswith(f"  {word}"), rows
    assert "  torch: same computation as jax (max |d output| 6.0e-08, loss within 0.0e+00)" in text
    assert (
        "  torch-native: COMPUTES OTHERWISE than jax: outputs before training differ by up to "
        "0.3 (tolerance 0.0001) (max |d output| 3.0e-01, loss within 0.0e+00); measured all the "
        "same: its ratio compares different computations"
    ) in text, text
    assert "  mxnet: not checked against jax: mxnet's check at warm-up could not be made" in text
    assert "against jax: from the same initial weights, the outputs on 2 test rows" in text
    unasked = agreement.unchecked("jax", NOT_ASKED)
    text = windows_table([document("jax", unasked), document("torch", unasked)])
    assert text.endswith(f"parity at warm-up: not checked: {NOT_ASKED}")
    assert parity_line("torch", unasked) == f"torch: not checked against jax: {NOT_ASKED}"


class FrameworkStandIn:
    """The few calls a Trainer's windows make of a backend, in numpy: this test is about what
    the warm worker does when initial weights cannot be loaded, not about a framework."""

    def fit_epoch(self, model, x, y, batch_size, clock):
        for _ in range(len(x) // batch_size):
            clock.batch_begin()
            clock.batch_end({"loss": 1.0})
        return {"loss": 1.0}

    def sync(self):
        pass


def test_weights_that_cannot_be_loaded_fail_the_check_not_the_worker(tmp_path):
    trainer = Trainer(
        backend=FrameworkStandIn(), model=None,
        arrays={"x_train": np.zeros((32, 2)), "y_train": np.zeros(32)},
        order=np.arange(32).reshape(1, -1), batch_size=4, data_format="channels_last",
    )  # fmt: skip
    task = SimpleNamespace(config={"warmup_steps": 2})
    command = {"do": "warmup", "window_s": 0.1, "steps": 3,
               "weights_in": str(tmp_path / "never-written.npz")}  # fmt: skip
    with pytest.raises(FileNotFoundError):  # tune's check: a trial that cannot load fails
        warm_up(trainer, task, command)
    ready = warm_up(trainer, task, command | {"check_optional": True})
    assert ready["check"]["error"].startswith("FileNotFoundError"), ready["check"]
    assert ready["window_steps"] == 3 and ready["warmup_steps"] == 2


class FailsOnce(FrameworkStandIn):
    """A training step that fails the first time (out of memory, say), then trains."""

    failed = False

    def predict(self, model, x):
        return np.zeros((len(x), 2))

    def fit_epoch(self, model, x, y, batch_size, clock):
        if not self.failed:
            self.failed = True
            raise RuntimeError("a training step failed")
        return super().fit_epoch(model, x, y, batch_size, clock)


def test_a_failed_training_step_at_warm_up_fails_the_worker_not_the_check():
    """The check's own failures are caught (above), a training step's are not: told apart
    by the steps begun, not by the position in the sample order, which wraps around (here
    2 warmup steps of 4 samples end where they began, in an order of 8)."""
    trainer = Trainer(
        backend=FailsOnce(), model=None,
        arrays={"x_train": np.zeros((8, 2)), "y_train": np.zeros(8), "x_test": np.zeros((4, 2))},
        order=np.arange(8).reshape(1, -1), batch_size=4, data_format="channels_last",
    )  # fmt: skip
    task = SimpleNamespace(config={"warmup_steps": 2})
    command = {"do": "warmup", "window_s": 0.1, "steps": 3, "check": True, "check_optional": True}
    with pytest.raises(RuntimeError, match="a training step failed"):
        warm_up(trainer, task, command)
    assert trainer.position == 0  # where it began: the position alone could not tell


def test_no_parity_check_is_refused_where_no_warm_windows_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        app.main(["run", "-b", "jax", "-m", "mlp", "--no-parity-check",
                  "--store", str(tmp_path / "store")])  # fmt: skip
    assert refused.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--no-parity-check: expected it only with warm windows" in err, err
    assert not (tmp_path / "store").exists()
