"""GPU environments (issue 32): one CUDA major version per environment, checked against the
wheels' own metadata; MXNet's CUDA libraries on its workers' library path; the check
(``python3 -m kbench.setup --check``) and the probe behind it; the kind a new environment
takes without KBENCH_GPU.

No CUDA wheel is downloaded here. The plans are held against ``setup_cuda_wheels.json``
(the Requires-Dist of the wheels pip chose from PyPI, recorded with ``pip install
--dry-run --report``); the check's judgement runs on ``setup_probe_keras3_cpu.json``, the
probe's real report of this machine's CPU keras3 environment (torch 2.13.0+cpu from the
local wheel folder pip is configured with), and, in the slow tests, on the probe run live
in the real environments.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import pytest

from kbench.run import environments
from kbench.setup import check, envs, platforms, probe
from kbench.setup.__main__ import main as setup_main
from kbench.setup.platforms import Platform, plan, venv_python

pytestmark = pytest.mark.own_processes("a probe of an environment")

ROOT = Path(__file__).resolve().parent.parent
LINUX = Platform("linux", "x86_64")
WHEELS = json.loads((Path(__file__).parent / "setup_cuda_wheels.json").read_text())
RESOLUTIONS = WHEELS["resolutions"]
CPU_PROBE = json.loads((Path(__file__).parent / "setup_probe_keras3_cpu.json").read_text())


def wheels(*names: str):
    """The recorded resolutions ``names`` as one {name: metadata}; later ones win."""
    merged = {}
    for name in names:
        merged.update(RESOLUTIONS[name]["wheels"])
    return merged


def framework_requirements(name: str, requirements):
    return [line for line in requirements if envs.framework_lines(name, [line])]


# ---------------------------------------------------------------- the plan


def test_each_gpu_plan_pins_one_cuda_for_every_framework_by_the_wheels_metadata():
    table = {}
    for name, resolution in (("keras3", "keras3-gpu"), ("mxnet", "mxnet-gpu")):
        wanted = plan(name, "gpu", LINUX)
        recorded = wheels(resolution)
        for line in framework_requirements(name, wanted.requirements):
            package, _, version = line.partition("==")
            assert version, f"{line}: a GPU framework must be pinned (==)"
            # a bump without a new recording fails here: record the metadata again
            assert recorded[check.parse_requirement(package)[0]]["version"] == version, line
        majors = check.mixed_cuda(wanted.requirements, recorded)
        assert set().union(*majors.values()) == {wanted.cuda}, majors
        assert check.one_cuda(wanted.requirements, recorded) is None
        table.update({line: majors[line] for line in framework_requirements(name, majors)})
    # the table of the CUDA major each pinned framework build needs, read off Requires-Dist
    assert table == {
        "tensorflow[and-cuda]==2.20.0": {"12"},  # nvidia-*-cu12 under the and-cuda extra
        "jax[cuda12]==0.10.2": {"12"},  # jax-cuda12-plugin[with-cuda]: nvidia-*-cu12
        "torch==2.10.0": {"12"},  # nvidia-*-cu12 pins, cuda-bindings 12.9.4
        "mxnet-cu112==1.9.1": {"11"},  # its name; the cu11 libraries beside it
    }
    assert plan("mxnet", "gpu", LINUX).loader_path and not plan("keras3", "gpu", LINUX).loader_path
    for name in ("keras3", "mxnet"):
        assert plan(name, "cpu", LINUX).cuda is None


def test_a_plan_that_mixes_cuda_versions_is_refused_with_the_frameworks_named():
    """The plan before issue 32: torch 2.13.0 (CUDA 13) beside TensorFlow and JAX for 12."""
    old = ("tensorflow[and-cuda]==2.20.0", "jax[cuda12]==0.10.2", "torch==2.13.0", "keras")
    recorded = wheels("keras3-gpu", "torch-2.13.0")
    assert check.cuda_majors("torch==2.13.0", recorded) == {"13"}  # cuda-toolkit==13.0.3
    problem = check.one_cuda(old, recorded)
    assert problem is not None
    assert "CUDA 12: tensorflow[and-cuda]==2.20.0, jax[cuda12]==0.10.2" in problem
    assert "CUDA 13: torch==2.13.0" in problem
    # and the mxnet libraries of another CUDA than mxnet-cu112's
    mixed = plan("mxnet", "gpu", LINUX).requirements + ("nvidia-cudnn-cu12==9.10.2.21",)
    assert "CUDA 12: nvidia-cudnn-cu12==9.10.2.21" in check.one_cuda(mixed, wheels("mxnet-gpu"))


def test_requirement_markers_are_read_for_linux_with_the_extras_asked_for():
    line = 'jax-cuda12-plugin[with-cuda]<=0.10.2,>=0.10.2; extra == "x"'
    assert check.parse_requirement(line) == (
        "jax-cuda12-plugin", ("with-cuda",), "<=0.10.2,>=0.10.2", 'extra == "x"'
    )  # fmt: skip
    assert check.applies_on_linux('platform_system == "Linux" and platform_machine == "x86_64"', ())
    assert not check.applies_on_linux('sys_platform == "darwin"', ())
    assert not check.applies_on_linux('extra == "and-cuda"', ())
    assert check.applies_on_linux('extra == "and-cuda"', ("and-cuda",))
    assert check.cuda_majors("tensorflow==2.20.0", wheels("keras3-gpu")) == set()  # no extra
    assert check.own_cuda_major("cuda-toolkit", "13.0.3") == "13"
    assert check.own_cuda_major("mxnet-cu117") == "11"
    assert check.own_cuda_major("nvidia-ml-py") is None


def test_the_driver_each_cuda_needs_is_named():
    assert check.driver_needed("12.8") == (
        "NVIDIA driver 525.60.13 or newer (CUDA 12.x); 570.26 or newer for all of CUDA 12.8 "
        "(PTX JIT)"
    )
    assert check.driver_needed("11.2").startswith("NVIDIA driver 450.80.02 or newer (CUDA 11.x)")
    assert check.driver_needed(None) == "no NVIDIA driver (CPU builds)"
    assert check.driver_fits("550.54.15", "12.8") and not check.driver_fits("470.82.01", "12.8")
    assert check.driver_fits("470.82.01", "11.2")


# ---------------------------------------------------------------- MXNet's library path


def test_mxnet_workers_get_the_cuda_libraries_on_their_library_path(tmp_path, monkeypatch):
    mxnet_env = tmp_path / "mxnet"
    for library in ("cudnn", "cublas"):
        (mxnet_env / "lib" / "python3.11" / "site-packages" / "nvidia" / library / "lib").mkdir(
            parents=True
        )
    (mxnet_env / "lib" / "python3.11" / "site-packages" / "nvidia" / "__init__.py").touch()
    folders = platforms.record_library_folders(mxnet_env)
    assert [f.parent.name for f in folders] == ["cublas", "cudnn"]
    assert (mxnet_env / platforms.LIBRARY_PATH_FILE).read_text().startswith("lib/python3.11/")
    monkeypatch.setenv("KBENCH_ENVS_DIR", str(tmp_path))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/mine")
    for backend in ("mxnet", "mxnet-gluon", "torch"):
        monkeypatch.delenv(environments.override_variable(backend), raising=False)
    env, _ = environments.process_environment("mxnet", tmp_path / "run", tmp_path, 1, None)
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [str(f) for f in folders] + ["/opt/mine"]
    gluon, _ = environments.process_environment("mxnet-gluon", tmp_path / "g", tmp_path, 1, None)
    assert gluon["LD_LIBRARY_PATH"] == env["LD_LIBRARY_PATH"]
    torch, _ = environments.process_environment("torch", tmp_path / "run2", tmp_path, 1, None)
    assert torch["LD_LIBRARY_PATH"] == "/opt/mine"  # keras3 has no such file
    # an interpreter of the user's own (KBENCH_PYTHON_MXNET) gets the path as it is
    monkeypatch.setenv("KBENCH_PYTHON_MXNET", sys.executable)
    own, _ = environments.process_environment("mxnet", tmp_path / "run3", tmp_path, 1, None)
    assert own["LD_LIBRARY_PATH"] == "/opt/mine"


# ---------------------------------------------------------------- the probe's facts


def fake_distribution(site: Path, name: str, version: str, files, requires=()) -> None:
    """A dist-info folder as pip leaves one: METADATA (with ``requires`` as Requires-Dist)
    and a RECORD listing ``files`` (path -> sha256 text); the files themselves are written
    too."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = "".join(f"Requires-Dist: {line}\n" for line in requires)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{lines}"
    )
    lines = []
    for path, digest in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(digest)
        lines.append(f"{path},sha256={digest},1")
    lines.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(lines) + "\n")


def two_cudas(site: Path):
    """What issue 32 found: cuDNN for CUDA 12 and for CUDA 13 over one another."""
    shared = "nvidia/cudnn/lib/libcudnn.so.9"
    fake_distribution(site, "nvidia-cudnn-cu12", "9.28.0.1",
                      {shared: "cu12", "nvidia/__init__.py": "empty"})  # fmt: skip
    fake_distribution(site, "nvidia-cudnn-cu13", "9.20.0.48",
                      {shared: "cu13", "nvidia/__init__.py": "empty"})  # fmt: skip
    fake_distribution(site, "cuda-toolkit", "13.0.3", {})
    found = {}
    for dist in metadata.distributions(path=[str(site)]):
        found[probe.normalize(dist.metadata["Name"])] = dist
    return found


def test_the_probe_finds_files_owned_twice_and_cuda_packages_of_two_versions(tmp_path):
    dists = two_cudas(tmp_path)
    twice = probe.owned_twice(dists)
    assert [(Path(e["file"]).name, e["owners"], e["identical"]) for e in twice] == [
        ("__init__.py", ["nvidia-cudnn-cu12", "nvidia-cudnn-cu13"], True),
        ("libcudnn.so.9", ["nvidia-cudnn-cu12", "nvidia-cudnn-cu13"], False),
    ]
    assert [(p["name"], p["cuda"]) for p in probe.cuda_packages(dists)] == [
        ("cuda-toolkit", "13"), ("nvidia-cudnn-cu12", "12"), ("nvidia-cudnn-cu13", "13"),
    ]  # fmt: skip
    # judged: two CUDA versions and one file overwritten are wrong, the empty
    # nvidia/__init__.py every nvidia-* wheel ships is not
    report = dict(CPU_PROBE, cuda_packages=probe.cuda_packages(dists), owned_twice=twice)
    verdict = check.judge(report, plan("keras3", "cpu", LINUX))
    assert any(p.startswith("CUDA libraries of 2 CUDA versions in one environment: CUDA 12: "
                            "nvidia-cudnn-cu12; CUDA 13: cuda-toolkit, nvidia-cudnn-cu13")
               for p in verdict.problems), verdict.problems  # fmt: skip
    clash = [p for p in verdict.problems if "owned by two packages" in p]
    assert len(clash) == 1 and clash[0].startswith("1 files owned by two packages with different")
    assert "libcudnn.so.9 (nvidia-cudnn-cu12, nvidia-cudnn-cu13)" in clash[0]


def test_cuda_and_cudnn_version_numbers_read_as_people_write_them():
    assert probe.version_text(12080) == "12.8"
    assert probe.version_text(11020) == "11.2"
    assert probe.version_text(91002) == "9.10.2"
    assert probe.version_text(8906) == "8.9.6"
    assert probe.version_text(0) is None
    assert probe.mxnet_cuda_from_name("mxnet-cu112") == "11.2"
    assert probe.mxnet_cuda_from_name("mxnet") is None


# ---------------------------------------------------------------- the check's judgement


def test_a_cpu_environment_passes_the_check_as_cpu_builds():
    verdict = check.judge(CPU_PROBE, plan("keras3", "cpu", LINUX))
    assert verdict.problems == []
    text = "\n".join(verdict.lines)
    assert "torch 2.13.0+cpu (torch): CPU build" in text
    assert "tensorflow 2.21.0 (tensorflow-cpu): CPU build" in text
    assert "jax 0.10.2 (jax): CPU build" in text
    assert "driver: none needed (CPU builds)" in text and verdict.lines[-1] == "  keras3: ok"


def test_cpu_wheels_in_a_gpu_environment_fail_the_check_with_the_reason():
    """The real report of a CPU environment held against the GPU plan: what a GPU build
    that pip filled from a local folder of CPU wheels looks like."""
    verdict = check.judge(CPU_PROBE, plan("keras3", "gpu", LINUX))
    assert len(verdict.problems) == 3, verdict.problems
    torch = next(p for p in verdict.problems if p.startswith("torch"))
    assert torch.startswith(
        "torch 2.13.0+cpu (torch) is a CPU build; the keras3 GPU environment's plan wants a "
        "CUDA 12 build (torch==2.10.0). pip took a CPU wheel"
    )
    assert "`pip config list`: find-links" in torch
    assert any(p.startswith("tensorflow 2.21.0 (tensorflow-cpu) is a CPU build") for p in
               verdict.problems)  # fmt: skip
    assert verdict.lines[-1] == "  keras3: 3 problem(s)"


def test_a_cuda_build_of_another_cuda_than_the_plan_is_wrong():
    report = json.loads(json.dumps(CPU_PROBE))
    report["frameworks"]["torch"]["build"] = {"cuda": "13.0", "cudnn": "9.20.0"}
    report["frameworks"]["torch"]["version"] = "2.13.0"
    verdict = check.judge(report, plan("keras3", "gpu", LINUX))
    assert ("torch 2.13.0 is built for CUDA 13.0; the keras3 environment's plan is CUDA 12 "
            "for every framework in it (torch==2.10.0)") in verdict.problems  # fmt: skip
    text = "\n".join(verdict.lines)
    assert "driver: none here; the CUDA 13.0 builds need NVIDIA driver 580.65.06" in text


def test_mxnet_that_imports_up_to_the_missing_driver_passes():
    """``import mxnet`` of mxnet-cu112 on a machine without a driver stops at libcuda.so.1:
    the check says so and passes; any other missing library is wrong."""
    error = "OSError: libcuda.so.1: cannot open shared object file: No such file or directory"
    facts = {
        "framework": "mxnet", "distribution": "mxnet-cu112", "version": "1.9.1",
        "imported": False, "error": error, "build": {"cuda_from_name": "11.2"}, "gpus": None,
        "loaded": [], "native": {"mxnet/libmxnet.so": ["libcuda.so.1"]},
    }  # fmt: skip
    report = dict(CPU_PROBE, frameworks={"mxnet": facts}, cuda_packages=[], owned_twice=[])
    verdict = check.judge(report, plan("mxnet", "gpu", LINUX))
    assert verdict.problems == [], verdict.problems
    text = "\n".join(verdict.lines)
    assert "mxnet 1.9.1 (mxnet-cu112): CUDA 11.2 build" in text
    assert f"imports up to the missing driver: {error}" in text
    assert "libcuda.so.1 needs the NVIDIA driver (not here): mxnet/libmxnet.so" in text
    facts["native"]["mxnet/libmxnet.so"].append("libcudnn.so.8")
    facts["error"] = "OSError: libcudnn.so.8: cannot open shared object file"
    verdict = check.judge(report, plan("mxnet", "gpu", LINUX))
    assert "unresolved shared libraries: mxnet/libmxnet.so needs libcudnn.so.8" in verdict.problems
    assert any(p.startswith("mxnet does not import: OSError: libcudnn.so.8") for p in
               verdict.problems)  # fmt: skip


def test_a_cuda_torch_in_a_cpu_environment_is_wrong_from_its_metadata(tmp_path, monkeypatch,
                                                                     capsys):  # fmt: skip
    """Issue 53: what a CPU environment gets from PyPI's Linux torch, found by --check. The
    environment is a real venv whose site-packages holds only torch's and one CUDA
    library's dist-info (no torch module: it does not import), so its build is read off
    its version (``+cu126``) and Requires-Dist, as the probe reads any torch's."""
    env_dir = tmp_path / "keras3"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True,
                   timeout=120)  # fmt: skip
    (env_dir / envs.KIND_FILE).write_text("cpu\n")
    site = next(env_dir.glob("lib/python3*/site-packages"))
    runtime = "nvidia-cuda-runtime-cu12==12.6.77; platform_system == 'Linux'"
    fake_distribution(site, "torch", "2.13.0+cu126", {}, requires=["filelock", runtime])
    fake_distribution(site, "nvidia-cuda-runtime-cu12", "12.6.77", {})
    monkeypatch.setenv("KBENCH_ENVS_DIR", str(tmp_path))
    assert setup_main(["--check", "keras3"]) == 1
    said = capsys.readouterr().out
    assert "torch 2.13.0+cu126 (torch): CUDA 12.6 build" in said
    assert (
        "keras3: torch 2.13.0+cu126 (torch) is a CUDA 12.6 build in the keras3 CPU "
        "environment: its CUDA libraries are several GB that no CPU run uses. Remove the "
        "environment and build it again (`python3 -m kbench.setup keras3`): its plan takes "
        "torch==2.13.0 from https://download.pytorch.org/whl/cpu"
    ) in said
    assert "CUDA libraries in a CPU environment (nvidia-cuda-runtime-cu12 12.6.77)" in said
    # PyPI's torch has no local label: its Requires-Dist says CUDA (on Linux only)
    pypi = {"version": "2.13.0", "requires_dist": ["sympy", runtime], "imported": False}
    assert check.framework_cuda(dict(pypi, framework="torch")) == (True, "12")
    mac = [runtime.replace("== 'Linux'", "== 'Darwin'")]
    assert check.declared_cuda(dict(pypi, requires_dist=mac)) == (None, None)
    assert check.declared_cuda({"version": "2.13.0+cpu"}) == (False, None)
    # the CPU plan's own torch passes (the real report of this machine's environment)
    assert check.judge(CPU_PROBE, plan("keras3", "cpu", LINUX)).problems == []


# ---------------------------------------------------------------- kinds and the dry run


def test_a_new_environment_follows_the_kind_of_those_beside_it_else_the_machine(tmp_path):
    envs_dir = tmp_path / "envs"
    (envs_dir / "keras3").mkdir(parents=True)
    (envs_dir / "keras3" / envs.KIND_FILE).write_text("gpu\n")
    kind, why = envs.kind_and_reason(envs_dir / "mxnet", None, driver_files=())
    assert kind == "gpu" and why.startswith("no KBENCH_GPU: following keras3 beside it, which "
                                            "holds gpu builds")  # fmt: skip
    assert envs.kind_and_reason(envs_dir / "mxnet", "0", driver_files=())[0] == "cpu"
    assert envs.kind_and_reason(envs_dir / "keras3", None, driver_files=())[0] == "gpu"
    driver = tmp_path / "version"
    assert envs.kind_and_reason(tmp_path / "none" / "mxnet", None, driver_files=())[0] == "cpu"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
    kind, why = envs.kind_and_reason(tmp_path / "none" / "mxnet", None, (str(driver),))
    assert kind == "gpu" and f"this machine has an NVIDIA driver ({driver})" in why


def test_the_dry_run_says_which_kind_and_why_and_lists_the_packages(tmp_path, caplog):
    (tmp_path / "keras3").mkdir()
    (tmp_path / "keras3" / envs.KIND_FILE).write_text("gpu\n")
    caplog.set_level(logging.INFO, logger="kbench.setup")
    options = envs.SetupOptions(envs_dir=tmp_path, python="python3", dry_run=True,
                                platform=LINUX)  # fmt: skip
    assert envs.make_environment("mxnet", options) == "create"
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0].startswith("mxnet: gpu builds: no KBENCH_GPU: following keras3")
    assert lines[1] == "mxnet: create (gpu builds)"
    assert lines[2] == "mxnet: would install " + " ".join(plan("mxnet", "gpu", LINUX).requirements)
    assert not (tmp_path / "mxnet").exists()


def test_the_cpu_plan_on_linux_takes_torch_from_pytorchs_cpu_index(tmp_path, caplog):
    """Issue 53: PyPI's Linux x86-64 torch is a CUDA build (several GB of nvidia-*); the
    CPU plan installs torch first, alone, from PyTorch's CPU wheel index, and its dry run
    says so. The requirements (and so an existing environment's stamp) are unchanged."""
    index = "https://download.pytorch.org/whl/cpu"
    for where in (LINUX, Platform("linux", "aarch64")):
        cpu = plan("keras3", "cpu", where)
        assert cpu.from_index == (("torch==2.13.0", index),)
        assert "torch==2.13.0" in cpu.requirements
    for where in (Platform("darwin", "arm64"), Platform("win32", "AMD64")):  # PyPI's is CPU
        assert plan("keras3", "cpu", where).from_index == ()
    assert plan("keras3", "gpu", LINUX).from_index == ()  # the CUDA build, from PyPI
    caplog.set_level(logging.INFO, logger="kbench.setup")
    options = envs.SetupOptions(envs_dir=tmp_path, python="python3", gpu="0", dry_run=True,
                                platform=LINUX)  # fmt: skip
    assert envs.make_environment("keras3", options) == "create"
    lines = [record.getMessage() for record in caplog.records]
    assert lines[1] == (
        f"keras3: would install torch==2.13.0 first, from {index} (pip install --index-url "
        f"{index} torch==2.13.0)"
    )
    assert lines[2].startswith("keras3: would install tensorflow-cpu jax[cpu] torch==2.13.0 ")


def test_a_gpu_environment_whose_cuda_builds_change_is_rebuilt_not_updated(tmp_path):
    env_dir = tmp_path / "keras3"
    env_dir.mkdir()
    (env_dir / envs.KIND_FILE).write_text("gpu\n")
    old = ["tensorflow[and-cuda]", "jax[cuda12]", "torch==2.13.0", "keras"]
    (env_dir / envs.STAMP_FILE).write_text(envs.stamp_text(old))
    done = envs.action(env_dir, plan("keras3", "gpu", LINUX), None)
    assert done.startswith(
        f"rebuild: {env_dir}'s CUDA builds change (jax[cuda12], tensorflow[and-cuda], "
        "torch==2.13.0 -> jax[cuda12]==0.10.2, "
    )
    assert "pip would keep the old ones' CUDA libraries" in done
    # a CUDA library added beside the same frameworks is an update
    mxnet = plan("mxnet", "gpu", LINUX)
    (tmp_path / "mxnet").mkdir()
    (tmp_path / "mxnet" / envs.KIND_FILE).write_text("gpu\n")
    (tmp_path / "mxnet" / envs.STAMP_FILE).write_text(envs.stamp_text(mxnet.requirements[:3]))
    assert envs.action(tmp_path / "mxnet", mxnet, None) == "update"
    assert envs.framework_lines("keras3", ["tensorflow-datasets", "keras", "torch==2.10.0"]) == [
        "torch==2.10.0"
    ]


# ---------------------------------------------------------------- the real environments


def real_env(name: str) -> Path:
    env_dir = environments.envs_dir() / name
    if not venv_python(env_dir).is_file():
        pytest.skip(f"no {name} environment at {env_dir}")
    return env_dir


@pytest.mark.slow  # imports torch in the real keras3 environment (~5 s)
def test_the_real_cpu_torch_in_keras3_fails_the_gpu_plan_with_the_reason():
    """The issue's case, live: torch 2.13.0+cpu from the local wheel folder pip is
    configured with, as the probe finds it in the real environment."""
    env_dir = real_env("keras3")
    if envs.existing_kind(env_dir) != "cpu":
        pytest.skip("the keras3 environment here holds CUDA builds")
    report = check.run_probe(env_dir, venv_python(env_dir), frameworks=("torch",))
    facts = report["frameworks"]["torch"]
    assert facts["imported"] and check.framework_cuda(facts) == (False, None), facts
    assert facts["native"]["torch/lib/libtorch_cpu.so"] == []  # ldd resolves everything
    verdict = check.Verdict()
    check.judge_framework("torch", facts, plan("keras3", "cpu"), False, verdict)
    assert verdict.problems == [] and "CPU build" in verdict.lines[0]
    check.judge_framework("torch", facts, plan("keras3", "gpu"), False, verdict)
    assert verdict.problems == [CPU_PROBE_TORCH_PROBLEM.format(version=facts["version"])]


CPU_PROBE_TORCH_PROBLEM = (
    "torch {version} (torch) is a CPU build; the keras3 GPU environment's plan wants a CUDA "
    "12 build (torch==2.10.0). pip took a CPU wheel: look for a local wheel folder or index "
    "in pip's configuration (`pip config list`: find-links, extra-index-url) that holds it, "
    "take it out (or set PIP_FIND_LINKS= for the set-up), and run the set-up again"
)


@pytest.mark.slow  # imports mxnet in the real mxnet environment (~5 s)
def test_setup_check_passes_on_the_real_cpu_mxnet_environment():
    env_dir = real_env("mxnet")
    if envs.existing_kind(env_dir) != "cpu":
        pytest.skip("the mxnet environment here holds CUDA builds")
    done = subprocess.run(
        [sys.executable, "-m", "kbench.setup", "--check", "mxnet"], cwd=ROOT,
        env=dict(os.environ, KBENCH_ENVS_DIR=str(env_dir.parent)),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"mxnet: {env_dir} (cpu builds, planned: CPU; Python 3." in done.stdout
    assert "  mxnet 1.9.1 (mxnet): CPU build; GPUs seen: 0" in done.stdout
    assert done.stdout.splitlines()[-1] == "check: ok"
    # the probe runs under any interpreter, outside the checkout, with no kbench
    alone = subprocess.run(
        [str(venv_python(env_dir)), "-I", str(check.PROBE), "mxnet"], cwd="/",
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    report = json.loads(alone.stdout)
    assert report["frameworks"]["mxnet"]["build"]["cuda"] is False
    assert report["python"]["prefix"] == str(env_dir)


def test_a_missing_environment_is_said_and_an_unfinished_one_is_wrong(tmp_path):
    (tmp_path / "mxnet").mkdir()
    verdict = check.check(tmp_path, envs.existing_kind, LINUX)
    assert verdict.lines[0] == f"keras3: not built (no {tmp_path / 'keras3'})"
    assert verdict.lines[1].startswith("  WRONG: mxnet: ")
    assert verdict.problems == [f"mxnet: {tmp_path / 'mxnet'} is not a finished kbench "
                                "environment; build it with python3 -m kbench.setup"]  # fmt: skip


def test_a_plan_can_be_narrowed_for_another_cuda():
    """What the lead does with a probe of another machine: judge it against CUDA 13."""
    thirteen = replace(plan("keras3", "gpu", LINUX), cuda="13")
    verdict = check.judge(CPU_PROBE, thirteen)
    assert any("wants a CUDA 13 build" in p for p in verdict.problems)
