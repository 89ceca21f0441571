"""``python3 -m kbench.setup --check``: whether each environment holds what its plan
says, before the first GPU run.

Each environment's own interpreter runs :mod:`kbench.setup.probe` (one child process per
framework, with its workers' library path), and :func:`judge` holds the report against
the plan. Wrong: in a GPU environment, a CPU build or a CUDA build of another major
version; in a CPU environment, a CUDA build (PyPI's Linux torch is one) or CUDA
libraries; CUDA libraries of two majors; files two distributions overwrote; shared
libraries ``ldd`` cannot find, except ``libcuda.so.1`` ("needs the NVIDIA driver"). It
also says which driver the CUDA builds need (NVIDIA's minimums, Linux x86-64) and
whether the one here fits. A wheel's CUDA is read off the libraries it requires
(``nvidia-cudnn-cu12``, ``cuda-toolkit==13.0.3``) or its name (``mxnet-cu112``):
:func:`cuda_majors` follows a requirement through the wheels' metadata. Standard library
only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from kbench.setup.platforms import (
    ENVIRONMENTS,
    FRAMEWORKS,
    EnvironmentPlan,
    loader_environment,
    plan,
    venv_python,
)
from kbench.setup.probe import normalize

# the oldest Linux driver that runs any release of a CUDA major version
DRIVER_MINIMUM = {"10": "410.48", "11": "450.80.02", "12": "525.60.13", "13": "580.65.06"}
# the driver each release shipped with (what it needs for everything, PTX JIT included)
DRIVER_OF_RELEASE = {
    "11.2": "460.27.03", "11.8": "520.61.05", "12.5": "555.42.02", "12.8": "570.26",
    "12.9": "575.51.03", "13.0": "580.65.06",
}  # fmt: skip

_CU_NAME = re.compile(r"^(?:nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)-cu(\d+)$")
_OWN_NAME = re.compile(r"^(?:jax-cuda(\d+)-(?:plugin|pjrt)|mxnet-cu(\d+)\d)$")
_VERSIONED = ("cuda-toolkit", "cuda-bindings")  # their version is the CUDA version


def parse_requirement(line: str) -> Tuple[str, Tuple[str, ...], str, str]:
    """``name[extra,...]SPEC; MARKER`` -> (name, extras, spec, marker), name normalized."""
    requirement, _, marker = line.partition(";")
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)", requirement)
    if not match:
        raise ValueError(f"not a requirement: {line!r}")
    extras = tuple(e.strip() for e in (match.group(2) or "[]")[1:-1].split(",") if e.strip())
    return normalize(match.group(1)), extras, match.group(3).strip(), marker.strip()


def applies_on_linux(marker: str, extras: Sequence[str]) -> bool:
    """Whether a Requires-Dist marker holds on Linux x86-64 with ``extras`` asked for (what
    the CUDA wheels write: ``extra``, ``sys_platform``, ``platform_*`` joined by ``and``)."""
    for wanted in re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker):
        if wanted not in extras:
            return False
    facts = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}
    for name, op, value in re.findall(r"(\w+)\s*(==|!=)\s*['\"]([^'\"]*)['\"]", marker):
        if name in facts and (facts[name] == value) != (op == "=="):
            return False
    return True


def own_cuda_major(name: str, version: str = "") -> Optional[str]:
    """The CUDA major version a distribution's name (or version) names, else None."""
    name = normalize(name)
    match = _CU_NAME.match(name) or _OWN_NAME.match(name)
    if match:
        return next(group for group in match.groups() if group)
    if name in _VERSIONED and version:
        return version.split(".")[0]
    return None


def cuda_majors(requirement: str, metadata: Mapping[str, Mapping[str, object]]) -> Set[str]:
    """The CUDA major versions ``requirement`` pulls in, following ``metadata``:
    {normalized name: {"version": str, "requires_dist": [str, ...]}} of the wheels pip
    chose. A requirement whose wheel is not in ``metadata`` counts by its name only."""
    found: Set[str] = set()
    seen: Set[Tuple[str, Tuple[str, ...], str]] = set()
    todo = [parse_requirement(requirement)[:3]]
    while todo:
        name, extras, spec = todo.pop()
        if (name, extras, spec) in seen:
            continue
        seen.add((name, extras, spec))
        facts = metadata.get(name, {})
        if facts and not satisfies(str(facts.get("version", "")), spec):
            facts = {}  # recorded for another pin: count this one by its name and pin
        pinned = re.fullmatch(r"==\s*([0-9][^,\s]*)", spec)
        version = str(facts.get("version") or (pinned.group(1) if pinned else ""))
        major = own_cuda_major(name, version)
        if major:
            found.add(major)
        for line in facts.get("requires_dist", ()) or ():  # type: ignore[union-attr]
            child, child_extras, child_spec, marker = parse_requirement(str(line))
            if applies_on_linux(marker, extras):
                todo.append((child, child_extras, child_spec))
    return found


def satisfies(version: str, spec: str) -> bool:
    """Whether ``version`` meets ``spec`` (``>=12.5,<13.0``; release numbers only)."""
    have = version_tuple(version.split("+")[0])
    for clause in filter(None, (part.strip() for part in spec.split(","))):
        match = re.fullmatch(r"(==|!=|>=|<=|~=|<|>)\s*([0-9][0-9.]*)[^,]*", clause)
        if not match:
            continue
        op, want = match.group(1), version_tuple(match.group(2))
        size = max(len(have), len(want))
        a, b = have + (0,) * (size - len(have)), want + (0,) * (size - len(want))
        holds = {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, "<": a < b,
                 ">": a > b, "~=": a >= b and have[: len(want) - 1] == want[:-1]}[op]  # fmt: skip
        if not holds:
            return False
    return True


def mixed_cuda(
    requirements: Sequence[str], metadata: Mapping[str, Mapping[str, object]]
) -> Dict[str, Set[str]]:
    """Each requirement that pulls in CUDA mapped to its majors."""
    table = {line: cuda_majors(line, metadata) for line in requirements}
    return {line: majors for line, majors in table.items() if majors}


def one_cuda(
    requirements: Sequence[str], metadata: Mapping[str, Mapping[str, object]]
) -> Optional[str]:
    """None when ``requirements`` pull in one CUDA major version at most; else what each
    version's requirements are, in words."""
    table = mixed_cuda(requirements, metadata)
    majors = sorted(set().union(*table.values()), key=version_tuple) if table else []
    if len(majors) < 2:
        return None
    parts = [f"CUDA {m}: {', '.join(r for r, found in table.items() if m in found)}"
             for m in majors]  # fmt: skip
    return f"{len(majors)} CUDA versions in one environment: " + "; ".join(parts)


def driver_needed(cuda_version: Optional[str]) -> str:
    """In words: the driver that CUDA ``12.8`` (or ``12``) builds need on Linux."""
    if not cuda_version:
        return "no NVIDIA driver (CPU builds)"
    major = cuda_version.split(".")[0]
    minimum = DRIVER_MINIMUM.get(major)
    if minimum is None:
        return f"an NVIDIA driver for CUDA {cuda_version}"
    text = f"NVIDIA driver {minimum} or newer (CUDA {major}.x)"
    release = ".".join(cuda_version.split(".")[:2])
    if release in DRIVER_OF_RELEASE:
        text += f"; {DRIVER_OF_RELEASE[release]} or newer for all of CUDA {release} (PTX JIT)"
    return text


def version_tuple(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def driver_fits(kernel_module: str, cuda_version: str) -> bool:
    """Whether the driver ``kernel_module`` (``550.54.15``) runs CUDA ``cuda_version``."""
    minimum = DRIVER_MINIMUM.get(cuda_version.split(".")[0])
    return minimum is None or version_tuple(kernel_module) >= version_tuple(minimum)


PROBE = Path(__file__).resolve().parent / "probe.py"
DRIVER_LIBRARY = "libcuda.so.1"  # only the NVIDIA driver provides it
PROBE_TIMEOUT_S = 1800


@dataclass
class Verdict:
    """The lines to show, and what is wrong."""

    lines: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)

    def wrong(self, text: str) -> None:
        self.problems.append(text)
        self.lines.append(f"  WRONG: {text}")


def run_probe(env_dir: Path, python: Path, frameworks: Sequence[str] = ()) -> Dict:
    """The probe's report on ``env_dir``, run with its workers' library path and a throw-away
    KERAS_HOME; ``frameworks`` narrows it (default: every framework installed)."""
    env = loader_environment(os.environ, env_dir)
    env.pop("PYTHONPATH", None)  # the environment as its own, not the checkout's kbench
    with tempfile.TemporaryDirectory(prefix="kbench-check-") as home:
        env["KERAS_HOME"] = home
        done = subprocess.run(
            [str(python), str(PROBE), *frameworks], env=env, cwd=home, capture_output=True,
            text=True, timeout=PROBE_TIMEOUT_S,
        )  # fmt: skip
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
    raise subprocess.SubprocessError(
        f"the probe of {env_dir} ({python}) wrote no report: it exited with "
        f"{done.returncode}: {tail}"
    )


def framework_cuda(facts: Mapping[str, Any]) -> Tuple[Optional[bool], Optional[str]]:
    """(is it a CUDA build, the CUDA version it is built for); None where the facts cannot say."""
    build = facts.get("build") or {}
    name = facts.get("framework")
    if name == "jax":
        plugins = build.get("plugins")
        if plugins is None:
            return None, None
        major = build.get("cuda_major")
        return bool(plugins), build.get("cuda") or (major if isinstance(major, str) else None)
    if name == "mxnet":
        named = build.get("cuda_from_name")
        if "cuda" in build and isinstance(build["cuda"], bool):
            return build["cuda"], named if build["cuda"] else None
        return (True, named) if named else (None, None)
    if not facts.get("imported"):
        return declared_cuda(facts)
    return bool(build.get("cuda")), build.get("cuda") or None


def declared_cuda(facts: Mapping[str, Any]) -> Tuple[Optional[bool], Optional[str]]:
    """What a framework's distribution says of its build without an import: its version's
    local label (``2.13.0+cu126``: CUDA 12.6; ``+cpu``), else the CUDA libraries its
    Requires-Dist asks for on Linux (PyPI's torch: ``nvidia-*-cu12``); None: it says not."""
    label = str(facts.get("version") or "").partition("+")[2]
    match = re.fullmatch(r"cu(\d+)(\d)", label)
    if match:
        return True, f"{match.group(1)}.{match.group(2)}"
    if label == "cpu":
        return False, None
    majors = set()
    for line in facts.get("requires_dist") or ():
        name, _, _, marker = parse_requirement(str(line))
        if applies_on_linux(marker, ()) and own_cuda_major(name):
            majors.add(own_cuda_major(name))
    if majors:
        return True, min(majors, key=version_tuple)
    return None, None


def driver_present(report: Mapping[str, Any]) -> bool:
    driver = report.get("driver") or {}
    return bool(driver.get("kernel_module") or driver.get("cuda"))


def describe_framework(facts: Mapping[str, Any]) -> str:
    """``torch 2.10.0+cu128: CUDA 12.8 build, cuDNN 9.10.2; loads cuDNN 9.10.2 ...``"""
    is_cuda, version = framework_cuda(facts)
    build = facts.get("build") or {}
    head = f"{facts['framework']} {facts.get('version') or '?'} ({facts.get('distribution')})"
    if is_cuda is None:
        kind = "build unknown"
    elif not is_cuda:
        kind = "CPU build"
    else:
        kind = f"CUDA {version or '?'} build"
        if build.get("cudnn") not in (None, False, True):
            kind += f", cuDNN {build['cudnn']}"
        elif build.get("cudnn") is True:
            kind += ", with cuDNN"
        for plugin, plugin_version in sorted((build.get("plugins") or {}).items()):
            kind += f", {plugin} {plugin_version}"
        if build.get("compute_capabilities"):  # compute_NN: PTX the driver compiles
            kind += f", kernels for {','.join(build['compute_capabilities'])}"
    loads = [f"{lib['path'].rsplit('/', 1)[-1]} {lib.get('version') or ''}".strip()
             + f" ({lib.get('owner') or 'no package'})"
             for lib in facts.get("loaded") or ()
             if "cudnn" in lib["path"] or "cudart" in lib["path"]]  # fmt: skip
    text = f"{head}: {kind}"
    for key, what in (("cuda_loaded", "CUDA runtime"), ("cudnn_loaded", "cuDNN")):
        if build.get(key) is not None:
            text += f"; loads {what} {build[key]}"
    if loads:
        text += f"; loaded: {', '.join(loads)}"
    if facts.get("imported"):
        text += f"; GPUs seen: {facts.get('gpus')}"
    return text


def judge_framework(
    name: str, facts: Optional[Mapping[str, Any]], wanted: EnvironmentPlan,
    has_driver: bool, verdict: Verdict,
) -> None:  # fmt: skip
    if facts is None:
        verdict.wrong(f"{name} is not installed in {wanted.name}; expected it there "
                      "(run the set-up again)")  # fmt: skip
        return
    verdict.lines.append(f"  {describe_framework(facts)}")
    error = facts.get("error") or ""
    if not facts.get("imported"):
        if DRIVER_LIBRARY in error and not has_driver:
            verdict.lines.append(f"    imports up to the missing driver: {error}")
        else:
            verdict.wrong(f"{name} does not import: {error}")
    if wanted.cuda is None:
        if wanted.kind == "cpu":
            judge_cpu_build(name, facts, wanted, verdict)
        return
    is_cuda, version = framework_cuda(facts)
    requirement = next((r for r in wanted.requirements if name in r.split("==")[0]), name)
    if is_cuda is False:
        verdict.wrong(
            f"{name} {facts.get('version')} ({facts.get('distribution')}) is a CPU build; "
            f"the {wanted.name} GPU environment's plan wants a CUDA {wanted.cuda} build "
            f"({requirement}). pip took a CPU wheel: look for a local wheel folder or "
            "index in pip's configuration (`pip config list`: find-links, "
            "extra-index-url) that holds it, take it out (or set PIP_FIND_LINKS= for the "
            "set-up), and run the set-up again"
        )
    elif is_cuda and version and version.split(".")[0] != wanted.cuda:
        verdict.wrong(
            f"{name} {facts.get('version')} is built for CUDA {version}; the "
            f"{wanted.name} environment's plan is CUDA {wanted.cuda} for every framework "
            f"in it ({requirement})"
        )
    for library in facts.get("loaded") or ():
        owner_major = own_cuda_major(library.get("owner") or "")
        if owner_major and owner_major != wanted.cuda:
            verdict.wrong(
                f"{name} loads {library['path']} of {library['owner']} (CUDA {owner_major}); "
                f"the plan is CUDA {wanted.cuda}"
            )


def judge_cpu_build(
    name: str, facts: Mapping[str, Any], wanted: EnvironmentPlan, verdict: Verdict
) -> None:
    """A CUDA build in a CPU environment is wrong: its CUDA libraries are GB no run uses."""
    is_cuda, version = framework_cuda(facts)
    if not is_cuda:
        return
    requirement = next((r for r in wanted.requirements if r.split("==")[0] == name), name)
    index = dict(wanted.from_index).get(requirement)
    source = f" from {index}" if index else ""
    verdict.wrong(
        f"{name} {facts.get('version')} ({facts.get('distribution')}) is a CUDA "
        f"{version or ''} build in the {wanted.name} CPU environment: its CUDA libraries "
        "are several GB that no CPU run uses. Remove the environment and build it again "
        f"(`python3 -m kbench.setup {wanted.name}`): its plan takes {requirement}{source}"
    )


def judge_libraries(report: Mapping[str, Any], wanted: EnvironmentPlan, verdict: Verdict) -> None:
    """CUDA packages (one major), files owned twice, unresolved shared libraries."""
    packages = report.get("cuda_packages") or []
    majors = sorted({p["cuda"] for p in packages if p.get("cuda")})
    names = ", ".join(f"{p['name']} {p['version']}" for p in packages)
    if len(majors) > 1:
        by_major = {m: [p["name"] for p in packages if p.get("cuda") == m] for m in majors}
        verdict.wrong(
            f"CUDA libraries of {len(majors)} CUDA versions in one environment: "
            + "; ".join(f"CUDA {m}: {', '.join(n)}" for m, n in by_major.items())
        )
    elif majors and wanted.cuda and majors[0] != wanted.cuda:
        verdict.wrong(f"its CUDA libraries are CUDA {majors[0]}; the plan is CUDA {wanted.cuda}")
    elif majors and wanted.kind == "cpu":
        verdict.wrong(f"CUDA libraries in a CPU environment ({names}): a CUDA build brought "
                      "them; the plan has none")  # fmt: skip
    else:
        what = f"CUDA {majors[0]} only" if majors else "none"
        verdict.lines.append(f"  CUDA libraries: {what}" + (f" ({names})" if names else ""))
    twice = report.get("owned_twice") or []
    clashes = [entry for entry in twice if not entry.get("identical")]
    if clashes:
        shown = "; ".join(f"{e['file']} ({', '.join(e['owners'])})" for e in clashes[:5])
        verdict.wrong(f"{len(clashes)} files owned by two packages with different contents "
                      f"(one overwrote the other): {shown}")  # fmt: skip
    else:
        same = f" ({len(twice)} identical, like nvidia/__init__.py)" if twice else ""
        verdict.lines.append(f"  files owned by two packages: none{same}")
    judge_unresolved(report, verdict)


def judge_unresolved(report: Mapping[str, Any], verdict: Verdict) -> None:
    """Shared libraries ``ldd`` could not find, per framework's native library."""
    has_driver = driver_present(report)
    missing: List[str] = []
    driver_only: List[str] = []
    for name, facts in sorted((report.get("frameworks") or {}).items()):
        native = facts.get("native") or {}
        if native.get("ldd", "") is None:
            verdict.lines.append(f"  shared libraries of {name}: not checked (no ldd here)")
            continue
        for library, unresolved in sorted(native.items()):
            for needed in unresolved or ():
                if needed == DRIVER_LIBRARY and not has_driver:
                    driver_only.append(library)
                else:
                    missing.append(f"{library} needs {needed}")
    if missing:
        verdict.wrong(f"unresolved shared libraries: {'; '.join(missing)}")
    else:
        verdict.lines.append("  unresolved shared libraries: none")
    if driver_only:
        verdict.lines.append(f"  {DRIVER_LIBRARY} needs the NVIDIA driver (not here): "
                             f"{', '.join(driver_only)}")  # fmt: skip


def judge_driver(report: Mapping[str, Any], verdict: Verdict) -> None:
    """What the CUDA builds need of the driver, and whether the one here gives it."""
    builds = map(framework_cuda, (report.get("frameworks") or {}).values())
    versions = [version for is_cuda, version in builds if is_cuda and version]
    if not versions:
        verdict.lines.append("  driver: none needed (CPU builds)")
        return
    newest = max(versions, key=version_tuple)
    need = driver_needed(newest)
    driver = report.get("driver") or {}
    if not driver_present(report):
        verdict.lines.append(f"  driver: none here; the CUDA {newest} builds need {need}")
        return
    module = driver.get("kernel_module") or "?"
    verdict.lines.append(
        f"  driver: {module} (supports CUDA {driver.get('cuda')}); the CUDA {newest} builds "
        f"need {need}"
    )
    for version in sorted(set(versions)):
        if driver.get("kernel_module") and not driver_fits(module, version):
            verdict.wrong(f"the driver {module} is too old for CUDA {version}: it needs "
                          f"{driver_needed(version)}")  # fmt: skip


def judge(report: Mapping[str, Any], wanted: EnvironmentPlan) -> Verdict:
    python = report.get("python") or {}
    planned = f"CUDA {wanted.cuda}" if wanted.cuda else "CPU"
    verdict = Verdict([
        f"{wanted.name}: {python.get('prefix')} ({wanted.kind} builds, planned: {planned}; "
        f"Python {python.get('version')})"
    ])  # fmt: skip
    frameworks = report.get("frameworks") or {}
    for name in FRAMEWORKS[wanted.name]:
        judge_framework(name, frameworks.get(name), wanted, driver_present(report), verdict)
    judge_libraries(report, wanted, verdict)
    judge_driver(report, verdict)
    verdict.lines.append(f"  {wanted.name}: " + (
        f"{len(verdict.problems)} problem(s)" if verdict.problems else "ok"
    ))  # fmt: skip
    return verdict


def check_environment(env_dir: Path, wanted: EnvironmentPlan) -> Verdict:
    python = venv_python(env_dir, wanted.platform.system)
    try:
        report = run_probe(env_dir, python)
    except (OSError, subprocess.SubprocessError) as err:  # the probe said nothing: why
        verdict = Verdict([f"{wanted.name}: {env_dir}"])
        verdict.wrong(str(err))
        return verdict
    return judge(report, wanted)


def check(
    envs_dir: Path, kind_of: Any, where: Any, mxnet_wheel: Optional[str] = None,
    names: Sequence[str] = ENVIRONMENTS,
) -> Verdict:  # fmt: skip
    """Check each environment in ``names`` under ``envs_dir``, against the plan of its kind."""
    total = Verdict()
    for name in names:
        env_dir = envs_dir / name
        kind = kind_of(env_dir)
        if kind == "none":
            total.lines.append(f"{name}: not built (no {env_dir})")
            continue
        if kind not in ("cpu", "gpu"):
            total.wrong(f"{name}: {env_dir} is not a finished kbench environment; build it "
                        "with python3 -m kbench.setup")  # fmt: skip
            continue
        wanted = plan(name, kind, where, mxnet_wheel)
        verdict = check_environment(env_dir, wanted)
        total.lines += verdict.lines
        total.problems += [f"{name}: {problem}" for problem in verdict.problems]
    return total
