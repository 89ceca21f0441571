"""The set-up (``python3 -m kbench.setup``) on every platform: what each platform is
planned to get and what it is refused (with the reason), where a venv keeps its
interpreter, that a finished environment is left alone, and that the wrappers
(``scripts/setup_envs.sh``, ``scripts/kbench``) hand their arguments to it.

Only Linux runs here: the macOS and Windows plans are checked with the platform
given explicitly or ``sys.platform``/``platform.machine()`` patched, and the Windows
wrappers (``.cmd``) are read, not run. The CPU/CUDA rebuild rules are tested through
the bash wrapper in ``test_gpu_options.py``.
"""

from __future__ import annotations

import logging
import os
import platform as std_platform
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from kbench.run import environments
from kbench.setup import __main__ as setup_command
from kbench.setup import envs
from kbench.setup.__main__ import main as setup_main
from kbench.setup.platforms import (
    KERAS3_COMMON,
    KERAS3_HUB,
    KERAS3_RUNTIMES,
    EnvironmentPlan,
    Platform,
    plan,
    unsupported_reason,
    venv_python,
)

ROOT = Path(__file__).resolve().parent.parent
LINUX = Platform("linux", "x86_64")
JETSON = Platform("linux", "aarch64")
INTEL_MAC = Platform("darwin", "x86_64")
APPLE_SILICON = Platform("darwin", "arm64")
WINDOWS = Platform("win32", "AMD64")

# What scripts/setup_envs.sh installed on Linux before the set-up moved to Python:
# the stamps of existing environments hold exactly these lines, so they stay ready.
LEGACY_KERAS3_CPU = (
    "tensorflow-cpu", "jax[cpu]", "torch==2.13.0", "keras", "tensorflow-datasets",
    "nvidia-ml-py", "psutil", "pyyaml", "pandas", "pyarrow", "matplotlib", "pillow",
    "scikit-learn", "pytest", "ruff",
)  # fmt: skip
LEGACY_MXNET_CPU = (
    "mxnet==1.9.1", "keras-mxnet==2.2.4.3", "numpy<1.24", "nvidia-ml-py", "psutil", "pillow",
)  # fmt: skip


# ---------------------------------------------------------------- platform specs


def test_linux_x86_64_gets_what_it_always_got():
    # plus pytest-xdist, which runs the suite on every core, and what builds the docs and
    # runs the example notebook (an old environment gets them installed on its next
    # set-up, nothing else changes)
    legacy = list(LEGACY_KERAS3_CPU)
    legacy.insert(legacy.index("ruff"), "pytest-xdist")
    legacy += ["mkdocs-material", "nbclient", "nbformat", "ipykernel"]
    # and the inference runtimes with what Keras' model.export needs for them (issue 51)
    legacy += ["onnxruntime==1.32.0", "openvino==2026.4.1", "nncf==3.4.0",
               "ai-edge-litert==2.3.0", "onnx==1.23.2", "tf2onnx==1.17.0", "scipy"]  # fmt: skip
    # and what keras-hub imports; keras-hub itself with --no-deps, after them (issue 52)
    legacy += ["kagglehub==1.0.2", "kagglesdk==0.1.28", "regex", "tokenizers", "sentencepiece"]
    assert plan("keras3", "cpu", LINUX).requirements == tuple(legacy)
    assert plan("keras3", "cpu", LINUX).no_deps == ("keras-hub==0.32.0",)
    assert plan("keras3", "cpu", LINUX).stamped[-1] == "keras-hub==0.32.0"
    assert plan("mxnet", "cpu", LINUX).requirements == LEGACY_MXNET_CPU
    # CUDA builds: pinned to one CUDA (12) for all three (issue 32; tests/test_setup_cuda.py)
    gpu = plan("keras3", "gpu", LINUX).requirements
    assert gpu[:3] == ("tensorflow[and-cuda]==2.20.0", "jax[cuda12]==0.10.2", "torch==2.10.0")
    assert gpu[3:] == KERAS3_COMMON + KERAS3_RUNTIMES + KERAS3_HUB
    assert plan("mxnet", "gpu", LINUX).requirements[0] == "mxnet-cu112==1.9.1"
    assert plan("mxnet", "gpu", LINUX, "mxnet-cu117").requirements[0] == "mxnet-cu117==1.9.1"
    for name in ("keras3", "mxnet"):
        for kind in ("cpu", "gpu"):
            wanted = plan(name, kind, LINUX)
            assert wanted.available and wanted.notes == (), wanted


def test_apple_silicon_has_no_mxnet_and_no_cuda_and_says_why():
    for kind in ("cpu", "gpu"):
        refused = plan("mxnet", kind, APPLE_SILICON)
        assert not refused.available and refused.requirements == ()
        assert "Apple Silicon" in refused.unavailable
        assert "Intel (x86-64) only" in refused.unavailable
    reason = plan("mxnet", "cpu", APPLE_SILICON).unavailable
    assert unsupported_reason("mxnet", APPLE_SILICON) == reason
    keras3 = plan("keras3", "cpu", APPLE_SILICON)
    assert keras3.available and "tensorflow" in keras3.requirements
    assert "tensorflow-cpu" not in keras3.requirements  # no macOS wheel of it
    assert any("MPS" in note for note in keras3.notes)
    cuda = plan("keras3", "gpu", APPLE_SILICON)
    assert not cuda.available and "no CUDA" in cuda.unavailable
    assert "KBENCH_GPU=0" in cuda.unavailable
    assert unsupported_reason("keras3", APPLE_SILICON) is None  # the CPU kind exists


def test_intel_mac_keeps_mxnet_1_9_1_but_no_cuda():
    keras3 = plan("keras3", "cpu", INTEL_MAC)
    assert "torch" in keras3.requirements and "torch==2.13.0" not in keras3.requirements
    assert "no Intel macOS wheel" in keras3.notes[0]
    # no OpenVINO wheel here, so no NNCF either (its quantizer), said
    assert not any(r.startswith(("openvino", "nncf")) for r in keras3.requirements)
    assert any(n.startswith("nncf is left out on") and "openvino" in n for n in keras3.notes)
    assert plan("mxnet", "cpu", INTEL_MAC).requirements[0] == "mxnet==1.9.1"
    assert unsupported_reason("mxnet", INTEL_MAC) is None
    assert "Linux x86-64 only" in plan("mxnet", "gpu", INTEL_MAC).unavailable


def test_windows_has_no_mxnet_for_its_python_and_is_told_tensorflow_has_no_gpu_build():
    for kind in ("cpu", "gpu"):
        refused = plan("mxnet", kind, WINDOWS).unavailable
        assert "1.7.0.post2" in refused and "numpy<1.17" in refused
        # issue 53: no Python 3.7 environment is offered: kbench's worker cannot run there
        assert "kbench's worker needs Python 3.9 or newer" in refused
        assert "Python 3.7" not in refused and "WSL2" in refused
    gpu = plan("keras3", "gpu", WINDOWS)
    assert gpu.available
    assert any("no native Windows GPU build after 2.10" in note for note in gpu.notes)
    assert not any("2.10" in note for note in plan("keras3", "cpu", WINDOWS).notes)


def test_linux_aarch64_has_mxnet_for_the_cpu_only():
    assert plan("mxnet", "cpu", JETSON).requirements[0] == "mxnet==1.9.1"
    assert "Linux aarch64" in plan("mxnet", "gpu", JETSON).unavailable
    assert plan("keras3", "cpu", JETSON).requirements[0] == "tensorflow"
    assert plan("keras3", "gpu", JETSON).requirements[1] == "jax[cuda12]==0.10.2"


def test_an_unknown_platform_or_setting_is_refused_with_what_is_expected():
    refused = plan("keras3", "cpu", Platform("freebsd13", "amd64"))
    assert "no environment spec for freebsd13" in refused.unavailable
    assert "KBENCH_PYTHON_<BACKEND>" in refused.unavailable
    with pytest.raises(ValueError, match="mxnet-cu101, .*mxnet-cu117"):
        plan("mxnet", "gpu", LINUX, "mxnet-cu999")
    with pytest.raises(ValueError, match="expected cpu .* or gpu"):
        plan("keras3", "tpu", LINUX)
    with pytest.raises(ValueError, match="expected 1 .* or 0"):
        envs.SetupOptions(envs_dir=Path("x"), python="python3", gpu="yes")


def test_the_platform_is_read_from_sys_platform_and_platform_machine(monkeypatch):
    seen = {}
    for system_name, machine in (("darwin", "arm64"), ("win32", "AMD64"), ("linux", "aarch64")):
        monkeypatch.setattr(sys, "platform", system_name)
        monkeypatch.setattr(std_platform, "machine", lambda m=machine: m)
        seen[system_name] = Platform.current().label
    monkeypatch.undo()
    assert seen == {"darwin": "macOS arm64", "win32": "Windows x86-64", "linux": "Linux aarch64"}


# ---------------------------------------------------------------- venv layout


def test_an_installed_kbench_keeps_its_environments_in_the_users_data_folder(tmp_path):
    """Issue 53: outside a checkout, envs/ beside kbench would be in site-packages."""
    home = {"HOME": str(tmp_path)}
    assert envs.default_envs_dir(home, in_checkout=True) == ROOT / "envs"
    data = tmp_path / ".local" / "share" / "kbench" / "envs"
    assert envs.default_envs_dir(home, in_checkout=False, system="linux") == data
    xdg = dict(home, XDG_DATA_HOME=str(tmp_path / "x"))
    assert envs.default_envs_dir(xdg, in_checkout=False) == tmp_path / "x" / "kbench" / "envs"
    windows = dict(home, LOCALAPPDATA=str(tmp_path / "L"))
    assert envs.default_envs_dir(windows, False, "win32") == tmp_path / "L" / "kbench" / "envs"
    moved = dict(xdg, KBENCH_ENVS_DIR=str(tmp_path / "mine"))
    assert envs.default_envs_dir(moved, in_checkout=False) == tmp_path / "mine"
    assert envs.default_envs_dir(moved, in_checkout=True) == tmp_path / "mine"


def test_the_venv_interpreter_is_where_venv_puts_it_on_each_system(tmp_path):
    assert venv_python(tmp_path, "win32") == tmp_path / "Scripts" / "python.exe"
    assert venv_python(tmp_path, "linux") == tmp_path / "bin" / "python"
    assert venv_python(tmp_path, "darwin") == tmp_path / "bin" / "python"
    # and on this system, where venv really made the keras3 environment
    real = environments.envs_dir() / "keras3"
    if real.is_dir():
        assert venv_python(real).is_file()


def test_the_runner_looks_up_the_interpreter_in_this_systems_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_ENVS_DIR", str(tmp_path))
    monkeypatch.delenv("KBENCH_PYTHON_TORCH", raising=False)
    monkeypatch.setattr(sys, "platform", "win32")
    python = tmp_path / "keras3" / "Scripts" / "python.exe"
    assert environments.path_of("keras3") == python
    # no environment of kbench's own: the interpreter kbench runs under (it has torch)
    assert environments.interpreter_for("torch") == Path(sys.executable)
    python.parent.mkdir(parents=True)
    python.write_bytes(b"")
    assert environments.interpreter_for("torch") == python
    monkeypatch.setattr(sys, "platform", "linux")  # bin/python, not Scripts/: none there
    assert environments.path_of("keras3") == tmp_path / "keras3" / "bin" / "python"
    assert environments.interpreter_for("torch") == Path(sys.executable)


def test_mxnet_backends_are_unsupported_on_apple_silicon_with_the_specs_reason(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("KBENCH_ENVS_DIR", str(tmp_path))
    for backend in ("mxnet", "mxnet-gluon", "jax"):
        monkeypatch.delenv(environments.override_variable(backend), raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(std_platform, "machine", lambda: "arm64")
    reasons = environments.runnable_backends()
    monkeypatch.undo()
    reason = unsupported_reason("mxnet", APPLE_SILICON)
    for backend in ("mxnet", "mxnet-gluon"):
        assert reasons[backend] == (
            f"backend {backend!r} is unsupported on macOS arm64: {reason} (to run it anyway, "
            f"point {environments.override_variable(backend)} at a Python that has it)."
        )
    # jax is not unsupported there: with no environment of kbench's own, the interpreter
    # kbench runs under (which has it) runs it
    assert reasons["jax"] is None


# ---------------------------------------------------------------- idempotence


def tiny_wheel(folder: Path) -> Path:
    """A pure-Python wheel pip installs without an index: the cheapest real requirement."""
    path = folder / "kbenchtiny-0.1-py3-none-any.whl"
    files = {
        "kbenchtiny/__init__.py": "VALUE = 17\n",
        "kbenchtiny-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: kbenchtiny\n"
        "Version: 0.1\n",
        "kbenchtiny-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: kbench-test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "kbenchtiny-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr("kbenchtiny-0.1.dist-info/RECORD", record)
    return path


@pytest.mark.slow  # a real venv with pip: ~5 s on a quiet machine, much more on a busy one
def test_a_real_environment_is_built_once_then_left_alone(tmp_path, monkeypatch, caplog):
    tiny_wheel(tmp_path)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing from the network: pip finds the wheel
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    options = envs.SetupOptions(envs_dir=tmp_path / "envs", python=sys.executable)

    def tiny(name, kind, where, wheel):  # kbenchtiny first "from an index" (torch's CPU
        # build on Linux): PIP_NO_INDEX leaves find-links, so this proves the pip command
        index = (("kbenchtiny", "https://example.invalid/simple"),)
        return EnvironmentPlan(name, kind, where, ("kbenchtiny",), from_index=index)

    caplog.set_level(logging.INFO, logger="kbench.setup")
    assert envs.make_environment("mxnet", options, planner=tiny) == "create"
    env_dir = tmp_path / "envs" / "mxnet"
    python = venv_python(env_dir)
    said = subprocess.run(
        [str(python), "-c", "import kbenchtiny; print(kbenchtiny.VALUE)"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert said.stdout.strip() == "17", said.stderr
    assert (env_dir / envs.STAMP_FILE).read_text() == "kbenchtiny\n"
    assert (env_dir / envs.KIND_FILE).read_text() == "cpu\n"
    assert "mxnet: ready" in caplog.text

    caplog.clear()
    stamp_time = (env_dir / envs.STAMP_FILE).stat().st_mtime_ns
    site_time = max(p.stat().st_mtime_ns for p in env_dir.rglob("*"))
    started = time.monotonic()
    assert envs.make_environment("mxnet", options, planner=tiny) == "ready"
    assert time.monotonic() - started < 1.0
    assert caplog.text == ""  # quiet: this runs before every scripts/kbench command
    assert (env_dir / envs.STAMP_FILE).stat().st_mtime_ns == stamp_time
    assert max(p.stat().st_mtime_ns for p in env_dir.rglob("*")) == site_time

    # a changed requirement list is an update of the same environment
    def more(name, kind, where, wheel):
        return EnvironmentPlan(name, kind, where, ("kbenchtiny", "pip"))

    dry = envs.SetupOptions(envs_dir=tmp_path / "envs", python=sys.executable, dry_run=True)
    assert envs.make_environment("mxnet", dry, planner=more) == "update"


def test_an_environment_the_platform_cannot_have_is_skipped_with_the_reason(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="kbench.setup")
    options = envs.SetupOptions(envs_dir=tmp_path, python="python3", platform=APPLE_SILICON)
    assert envs.make_environment("mxnet", options) == "unavailable"
    assert "mxnet: unavailable on macOS arm64 (cpu builds): MXNet has no build" in caplog.text
    assert not (tmp_path / "mxnet").exists()


def test_an_environment_from_before_the_kind_file_is_read_off_its_stamp(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / envs.STAMP_FILE).write_text("mxnet-cu112==1.9.1\nkeras-mxnet==2.2.4.3\n")
    assert envs.existing_kind(tmp_path / "old") == "gpu"
    (tmp_path / "old" / envs.STAMP_FILE).write_text("\n".join(LEGACY_KERAS3_CPU) + "\n")
    assert envs.existing_kind(tmp_path / "old") == "cpu"
    (tmp_path / "half").mkdir()
    assert envs.existing_kind(tmp_path / "half") == "unknown"
    assert envs.existing_kind(tmp_path / "none") == "none"


def test_the_real_environments_are_ready_with_their_old_stamps():
    """envs/ was made by the bash script: the Python set-up finds it ready as it is."""
    options = envs.SetupOptions.from_environ({"KBENCH_ENVS_DIR": str(environments.envs_dir())})
    for name in ("keras3", "mxnet"):
        env_dir = options.envs_dir / name
        if not env_dir.is_dir():
            continue
        kind = envs.kind_and_reason(env_dir, None)[0]
        assert envs.action(env_dir, plan(name, kind), None) == "ready", name


# ---------------------------------------------------------------- system packages


@pytest.fixture
def bare_system(tmp_path, monkeypatch):
    """No chromium, no C compiler, no Debian Fashion-MNIST: an empty PATH and data path."""
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(setup_command, "DEBIAN_FASHION_MNIST", tmp_path / "no-such-dataset")
    return tmp_path


def test_system_packages_off_linux_say_what_to_install_and_try_data_once(bare_system, caplog):
    caplog.set_level(logging.INFO, logger="kbench.setup")

    def no_apt(packages):
        raise AssertionError(f"apt-get called off Linux for {packages}")

    envs_dir = bare_system / "envs"
    assert setup_command.install("browser", envs_dir, APPLE_SILICON, no_apt) == "manual"
    assert "browser: no apt-get on macOS arm64; install chromium" in caplog.text
    assert setup_command.install("compiler", envs_dir, WINDOWS, no_apt) == "manual"
    assert "compiler: no apt-get on Windows x86-64; install a C compiler" in caplog.text
    assert setup_command.install("data", envs_dir, WINDOWS, no_apt) == "manual"
    assert setup_command.install("data", envs_dir, WINDOWS, no_apt) == "present"  # tried once


@pytest.mark.skipif(getattr(os, "geteuid", lambda: 1)() != 0, reason="apt-get needs root")
def test_system_packages_on_debian_go_through_apt_get(bare_system):
    """apt-get itself is a stand-in on the PATH that records its arguments: a test must
    not install packages on the machine that runs it."""
    record = bare_system / "apt-calls"
    apt = bare_system / "bin" / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$@" >> {record}\n[ "$1" = update ]\n')
    apt.chmod(0o755)
    linux = Platform("linux", "x86_64")
    apt_get = setup_command.apt_get_install
    # the install fails, then update, then the install fails again
    assert setup_command.install("compiler", bare_system, linux, apt_get) == "failed"
    assert record.read_text().splitlines() == [
        "install -y -qq gcc libc6-dev", "update -qq", "install -y -qq gcc libc6-dev",
    ]  # fmt: skip
    apt.write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    assert setup_command.install("browser", bare_system, linux, apt_get) == "installed"
    assert record.read_text().splitlines()[-1] == "install -y -qq chromium"


# ---------------------------------------------------------------- the wrappers


POSIX_ONLY = pytest.mark.skipif(
    os.name == "nt", reason="the bash wrappers; CI runs the .cmd ones on Windows"
)


def wrapper(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("KBENCH_")}
    full.update(env)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / script), *args],
        env=full, capture_output=True, text=True, timeout=300, cwd="/",
    )  # fmt: skip


@POSIX_ONLY
def test_setup_envs_sh_forwards_its_arguments_and_settings(tmp_path):
    done = wrapper("setup_envs.sh", "mxnet", "browser", KBENCH_ENVS_DIR=str(tmp_path),
                   KBENCH_SETUP_DRY_RUN="1", KBENCH_GPU="1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "[setup] mxnet: create (gpu builds)"
    assert lines[1].startswith("[setup] mxnet: would install mxnet-cu112==1.9.1 ")  # issue 32
    assert "nvidia-cudnn-cu11==8.9.6.50" in lines[1].split()
    assert lines[2:] == ["[setup] browser: not checked in a dry run"]
    assert list(tmp_path.iterdir()) == []  # a dry run changes nothing
    bad = wrapper("setup_envs.sh", "keras3", "tensorflow", KBENCH_ENVS_DIR=str(tmp_path))
    assert bad.returncode == 2
    expected = "expected keras3, mxnet, data, browser, compiler or slurm"
    assert f"unknown target 'tensorflow'; {expected}" in bad.stderr
    wheel = wrapper("setup_envs.sh", "mxnet", KBENCH_ENVS_DIR=str(tmp_path), KBENCH_GPU="1",
                    KBENCH_MXNET_WHEEL="mxnet-cu99")  # fmt: skip
    assert wheel.returncode == 2 and "KBENCH_MXNET_WHEEL=mxnet-cu99: expected one of" in (
        wheel.stderr
    )
    assert "KBENCH_SETUP_DRY_RUN" in wrapper("setup_envs.sh", "--help").stdout
    assert list(tmp_path.iterdir()) == []


def test_the_module_runs_without_any_third_party_package(tmp_path):
    """``python -I -S``: no site-packages at all, as before any environment exists."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c",
         "import sys; sys.path.insert(0, sys.argv[1]); from kbench.setup.__main__ import main;"
         " sys.exit(main(['keras3']))", str(ROOT)],
        env=dict(os.environ, KBENCH_ENVS_DIR=str(tmp_path), KBENCH_SETUP_DRY_RUN="1"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "[setup] keras3: create (cpu builds)" in done.stderr


def test_the_python_entry_and_the_wrapper_agree(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KBENCH_ENVS_DIR", str(tmp_path))
    monkeypatch.setenv("KBENCH_GPU", "maybe")
    assert setup_main(["keras3"]) == 2
    with pytest.raises(SystemExit) as stop:
        setup_main(["--help"])
    assert stop.value.code == 0 and "KBENCH_MXNET_WHEEL" in capsys.readouterr().out


@POSIX_ONLY
def test_scripts_kbench_sets_up_then_forwards_its_arguments_to_the_cli():
    if not venv_python(environments.envs_dir() / "keras3").is_file():
        pytest.skip("no keras3 environment: scripts/kbench would create it (minutes)")
    envs_dir = str(environments.envs_dir())
    done = wrapper("kbench", "run", "--backend", "no-such-backend", KBENCH_ENVS_DIR=envs_dir)
    assert done.returncode == 2, done.stderr
    assert "no-such-backend" in done.stderr and "[setup]" not in done.stderr


def test_the_windows_wrappers_call_the_same_module_and_forward_every_argument():
    """Read, not run: there is no Windows here (the CI workflow runs them)."""
    setup = (ROOT / "scripts" / "setup_envs.cmd").read_text()
    assert "-m kbench.setup %*" in setup and "PYTHONPATH" in setup
    kbench = (ROOT / "scripts" / "kbench.cmd").read_text()
    assert 'call "%~dp0setup_envs.cmd"' in kbench
    assert '\\keras3\\Scripts\\python.exe" -m kbench %*' in kbench
    assert "KBENCH_ENVS_DIR" in kbench
    for name in ("setup_envs.cmd", "kbench.cmd"):
        raw = (ROOT / "scripts" / name).read_bytes()
        assert raw.count(b"\r\n") == raw.count(b"\n"), f"{name}: cmd.exe needs CRLF line ends"
