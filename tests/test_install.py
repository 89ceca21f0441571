"""kbench installed as Python users install it: a wheel built from the checkout, put with
pip into a fresh virtual environment outside the checkout, runs the backends whose
frameworks that environment has, with no ``envs/``, and ``kbench env`` says which.

The frameworks are not downloaded again: the fresh environment sees the keras3
environment's packages (a folder of links to them, kbench's own editable install left
out) on its path, so pip finds ``kbench[tensorflow,torch]``'s requirements installed and
``--no-index`` proves that the extras' pins are the environment plan's. Slow: a wheel,
a venv, pip and two framework workers (about a minute on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbench.measure import sysinfo
from kbench.results.analysis import cpu_text
from kbench.run.environments import envs_dir
from kbench.setup.platforms import venv_python

ROOT = Path(__file__).resolve().parent.parent
# what of the keras3 environment's site-packages the fresh one must not see: kbench itself
# (an editable install pointing at this checkout) and the suite's own start-up hooks
LEFT_OUT = ("__editable__", "kbench", "distutils-precedence.pth", "__pycache__")

pytestmark = pytest.mark.slow


def keras3_site_packages() -> Path:
    python = venv_python(envs_dir() / "keras3")
    if not python.exists():
        pytest.skip(f"no keras3 environment ({python}): scripts/setup_envs.sh keras3")
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.check_output([str(python), "-c", code], text=True).strip())


def run(command, **options) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **options)
    assert done.returncode == 0, f"{command}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the fresh environment's bin folder, a clean process environment, its folder)."""
    site = keras3_site_packages()
    home = tmp_path_factory.mktemp("user")
    wheels = home / "wheels"
    python = venv_python(envs_dir() / "keras3")
    run([str(python), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(ROOT)])  # fmt: skip
    seen = home / "frameworks"
    seen.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(LEFT_OUT) and not entry.name.endswith(".pth"):
            (seen / entry.name).symlink_to(entry)
    venv = home / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    fresh = venv_python(venv)
    # a user's process: no PYTHONPATH (the checkout on it would show pip the kbench.egg-info
    # that the wheel's build leaves there: "already satisfied", nothing installed)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KBENCH_", "PYTHON"))}
    env.update(
        HOME=str(home),
        KERAS_HOME=str(home / "keras"),
        PATH=f"{fresh.parent}{os.pathsep}{env['PATH']}",
    )
    env.pop("XDG_DATA_HOME", None)
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = run([str(fresh), "-c", code], env=env)
    (Path(purelib.stdout.strip()) / "frameworks.pth").write_text(f"{seen}\n")
    # the venv's own setuptools (older than torch's requirement) would hide the keras3 one
    run([str(fresh), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], env=env)
    wheel = next(wheels.glob("kbench-*.whl"))
    install = [str(fresh), "-m", "pip", "install", "-q", "--no-index", f"{wheel}[tensorflow,torch]"]
    run(install, env=env)
    return fresh.parent, env, home


def test_installed_kbench_runs_the_frameworks_of_its_own_environment(installed):
    bin_dir, env, home = installed
    work = home / "work"
    work.mkdir()
    store = work / "S"
    command = [str(bin_dir / "kbench"), "run", "-b", "tensorflow,torch", "-m", "mlp",
               "--dataset", "synthetic", "--steps", "5", "--ratio-budget", "10",
               "--store", str(store)]  # fmt: skip
    done = run(command, cwd=work, env=env)
    documents = [json.loads(p.read_text()) for p in store.glob("*.json")]
    backends = sorted(d["config"]["backend"] for d in documents)
    assert backends == ["tensorflow", "torch"], done.stdout + done.stderr
    for document in documents:
        assert document["status"] == "ok", document.get("reason")
        assert Path(document["environment"]["interpreter"]).parent == bin_dir
    assert str(ROOT) not in done.stdout + done.stderr


def test_installed_kbench_env_says_what_this_interpreter_runs(installed):
    bin_dir, env, home = installed
    done = subprocess.run([str(bin_dir / "kbench"), "env"], cwd=home, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stderr  # mxnet cannot run here
    # the CPU line names the features that decide the kernels; a column says which ran
    assert cpu_text(sysinfo.machine()) in done.stdout.splitlines()[0]
    assert "CPU kernels" in done.stdout.splitlines()[1]
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[3:9]}
    for backend in ("tensorflow", "jax", "torch", "torch-native"):
        assert rows[backend].split()[1:4] == ["yes", "this", "interpreter"], rows[backend]
    said = [line for line in done.stdout.splitlines() if line.startswith("  mxnet:")]
    assert said and "cannot share an environment with Keras 3" in said[0], done.stdout
    assert "pip install" not in said[0] and str(bin_dir / "python") in said[0]
    own = home / ".local" / "share" / "kbench" / "envs"  # the user's data folder
    assert f"create kbench's own environment with: kbench setup mxnet (expected {own}" in said[0]


def test_installed_kbench_sets_up_its_own_environments_in_the_users_folder(installed):
    """``kbench setup`` without a checkout: the same plans, in the folder the runner looks
    in (a dry run and a check here: a real build downloads gigabytes)."""
    bin_dir, env, home = installed
    own = home / ".local" / "share" / "kbench" / "envs"
    dry = run([str(bin_dir / "kbench"), "setup", "--dry-run", "keras3", "mxnet"], cwd=home,
              env=env)  # fmt: skip
    said = dry.stdout + dry.stderr
    assert f"kbench's environments: {own}" in said
    assert "keras3: create (cpu builds)" in said and "mxnet: create (cpu builds)" in said
    if sys.platform.startswith("linux"):  # PyPI's Linux torch is a CUDA build
        assert (
            "keras3: would install torch==2.13.0 first, from https://download.pytorch.org/whl/cpu"
            in said
        )
    assert "mxnet: would install mxnet==1.9.1 keras-mxnet==2.2.4.3" in said
    assert not own.exists()
    check = run([str(bin_dir / "kbench"), "setup", "--check"], cwd=home, env=env)
    assert f"keras3: not built (no {own / 'keras3'})" in check.stdout
    assert check.stdout.splitlines()[-1] == "check: ok"
