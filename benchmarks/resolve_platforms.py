"""Which of kbench's environments can be installed on which platform, by pip's own resolver.

For each target platform (Linux x86-64 and aarch64 manylinux, macOS x86-64 and arm64,
Windows amd64; CPython 3.11) and each environment and kind that
``kbench.setup.platforms`` plans for it, runs

    python -m pip install --dry-run --ignore-installed --only-binary=:all:
        --platform TAG ... --python-version 3.11 --implementation cp --report FILE REQS

and prints a table: what resolves (with the versions pip chose for the frameworks) and,
where not, the gist of pip's error. An environment the plan refuses on a platform is
checked too: pip is asked for the Linux x86-64 frameworks there, to show that the
refusal is pip's answer as well. Needs the package index, so it is a check to run by
hand, not a test:

    envs/keras3/bin/python benchmarks/resolve_platforms.py
    envs/keras3/bin/python benchmarks/resolve_platforms.py --platforms macos-arm64 --kinds cpu

pip evaluates environment markers (``sys_platform == "linux"``) for the machine it runs
on, whatever ``--platform`` says, so torch's Linux-only CUDA dependencies would be asked
of macOS. Each pip therefore runs with its marker environment set to the target's (its
vendored ``packaging.markers.default_environment`` replaced before pip starts); the
resolution itself is pip's. ``--isolated`` keeps this machine's pip configuration (local
wheel folders, constraints) out, so the answer is PyPI's.

``--platform`` needs ``--only-binary=:all:``, but a few pure-Python dependencies are
published only as source (``promise``, which tensorflow-datasets needs): a real install
builds them on any system. They are built into wheels once, here, and offered with
``--find-links`` (``--sdist-only``), so that they do not hide what matters: the
compiled frameworks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from kbench.setup.platforms import ENVIRONMENTS, KINDS, Platform, plan


@dataclass(frozen=True)
class Target:
    key: str
    platform: Platform
    tags: Tuple[str, ...]  # pip --platform values (pip adds the older macOS ones itself)
    markers: Dict[str, str]


def _markers(sys_platform: str, system: str, machine: str, os_name: str) -> Dict[str, str]:
    return {
        "sys_platform": sys_platform, "platform_system": system, "platform_machine": machine,
        "os_name": os_name, "python_version": "3.11", "python_full_version": "3.11.9",
        "implementation_name": "cpython", "platform_python_implementation": "CPython",
        "implementation_version": "3.11.9",
    }  # fmt: skip


def _manylinux(arch: str) -> Tuple[str, ...]:
    """glibc 2.28 (Debian 10, RHEL 8) and every older manylinux tag: pip does not widen an
    explicit ``manylinux_2_28`` to the older ones (mxnet 1.9.1 is ``manylinux2014``)."""
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(28, 16, -1)]
    return tuple(tags + [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"])


TARGETS = {
    t.key: t
    for t in (
        Target("linux-x86_64", Platform("linux", "x86_64"), _manylinux("x86_64"),
               _markers("linux", "Linux", "x86_64", "posix")),
        Target("linux-aarch64", Platform("linux", "aarch64"), _manylinux("aarch64"),
               _markers("linux", "Linux", "aarch64", "posix")),
        Target("macos-x86_64", Platform("darwin", "x86_64"), ("macosx_14_0_x86_64",),
               _markers("darwin", "Darwin", "x86_64", "posix")),
        Target("macos-arm64", Platform("darwin", "arm64"), ("macosx_14_0_arm64",),
               _markers("darwin", "Darwin", "arm64", "posix")),
        Target("windows-amd64", Platform("win32", "AMD64"), ("win_amd64",),
               _markers("win32", "Windows", "AMD64", "nt")),
    )
}  # fmt: skip

# pip, with the target's marker environment: argv[1] is it (JSON), the rest pip's arguments
PIP_WITH_MARKERS = """\
import json, sys
from pip._vendor.packaging import markers
target = json.loads(sys.argv[1])
here = markers.default_environment
markers.default_environment = lambda: dict(here(), **target)
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""

SHOWN = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "jax", "jaxlib", "torch", "keras",
         "mxnet", *(f"mxnet-cu{v}" for v in range(90, 120)), "keras-mxnet", "numpy")  # fmt: skip


@dataclass
class Row:
    target: str
    environment: str
    kind: str
    planned: str  # "planned" or "refused: reason"
    requirements: Tuple[str, ...]
    resolved: Optional[bool] = None
    detail: str = ""
    seconds: float = 0.0


def build_source_only(names: Sequence[str], folder: Path, isolated: bool) -> None:
    """Wheels of the pure-Python, source-only dependencies, into ``folder``."""
    if not names:
        return
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(folder)]
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull) if isolated else None
    command += ["--isolated"] if isolated else []
    subprocess.run(command + list(names), check=True, env=env)


def resolve(
    target: Target, requirements: Sequence[str], isolated: bool, timeout: float, links: Path
):
    """(resolved?, versions or the error's gist, seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-c", PIP_WITH_MARKERS, json.dumps(target.markers),
                   "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
                   "--python-version", "3.11", "--implementation", "cp",
                   "--find-links", str(links), "--report", str(report)]  # fmt: skip
        env = dict(os.environ)
        if isolated:  # --isolated still reads the global pip.conf; os.devnull reads none
            command.insert(command.index("install") + 1, "--isolated")
            env["PIP_CONFIG_FILE"] = os.devnull
        for tag in target.tags:
            command += ["--platform", tag]
        command += list(requirements)
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return False, f"pip did not finish in {timeout:.0f} s", time.monotonic() - started
        seconds = time.monotonic() - started
        if done.returncode == 0 and report.is_file():
            chosen = {
                item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]
            }
            shown = [f"{name} {chosen[name]}" for name in SHOWN if name in chosen]
            return True, ", ".join(shown) + f" ({len(chosen)} packages)", seconds
        return False, gist(done.stdout + "\n" + done.stderr), seconds


def gist(error: str) -> str:
    """pip's answer in a line: the requirement it found nothing for, the packages with
    no distribution for the platform, else its last error."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("ERROR: No matching distribution found for"):
            return line[len("ERROR: ") :]
    marker = "no matching distributions available for your environment:"
    for index, line in enumerate(lines):
        if line.endswith(marker):
            names = [n for n in lines[index + 1 : index + 6] if " " not in n]
            cannot = next((c for c in lines if c.startswith("ERROR: Cannot install")), "")
            return f"no wheel here for {', '.join(names)} ({cannot[7:120]}...)"
    if "The conflict is caused by:" in lines:  # ResolutionImpossible: name the causes
        start = lines.index("The conflict is caused by:") + 1
        causes = [line for line in lines[start:] if " depends on " in line]
        return "conflict: " + "; ".join(causes[:3])
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["(no output)"])[-1].removeprefix("ERROR: ")[:300]


def rows_for(targets: List[Target], kinds: Sequence[str]) -> List[Tuple[Row, Target]]:
    reference = Platform("linux", "x86_64")
    out = []
    for target in targets:
        for name in ENVIRONMENTS:
            for kind in kinds:
                wanted = plan(name, kind, target.platform)
                if wanted.available:
                    row = Row(target.key, name, kind, "planned", wanted.requirements)
                else:  # ask pip for Linux x86-64's frameworks here, to check the refusal
                    linux = plan(name, kind, reference).requirements
                    frameworks = linux[:3] if name == "keras3" else linux[:1]
                    row = Row(target.key, name, kind, f"refused: {wanted.unavailable}", frameworks)
                out.append((row, target))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="targets: " + ", ".join(TARGETS),
    )
    parser.add_argument("--platforms", default=",".join(TARGETS),
                        help="comma-separated targets (default: all)")  # fmt: skip
    parser.add_argument("--kinds", default=",".join(KINDS), help="cpu, gpu or both")
    parser.add_argument("--jobs", type=int, default=2, help="pip resolutions at once")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per resolution")
    parser.add_argument(
        "--use-pip-config",
        action="store_true",
        help="honour this machine's pip configuration (default: PyPI only)",
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--sdist-only",
        default="promise",
        help="pure-Python dependencies published only as source, built to wheels first "
        "(comma-separated; default: promise)",
    )
    args = parser.parse_args()
    unknown = [p for p in args.platforms.split(",") if p not in TARGETS]
    if unknown:
        parser.error(f"unknown platform {unknown[0]!r}; expected some of {', '.join(TARGETS)}")
    kinds = [k for k in args.kinds.split(",") if k]
    if not set(kinds) <= set(KINDS):
        parser.error(f"--kinds {args.kinds}: expected cpu, gpu or cpu,gpu")
    work = rows_for([TARGETS[p] for p in args.platforms.split(",")], kinds)

    links = Path(tempfile.mkdtemp(prefix="kbench-resolve-"))
    build_source_only([n for n in args.sdist_only.split(",") if n], links, not args.use_pip_config)

    def run(item: Tuple[Row, Target]) -> Row:
        row, target = item
        row.resolved, row.detail, row.seconds = resolve(
            target, row.requirements, not args.use_pip_config, args.timeout, links
        )
        print(f"  {row.target} {row.environment} {row.kind}: "
              f"{'resolves' if row.resolved else 'no'} ({row.seconds:.0f} s): {row.detail}",
              file=sys.stderr, flush=True)  # fmt: skip
        return row

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(run, work))
    source = "this pip configuration" if args.use_pip_config else "PyPI only (--isolated)"
    built = ", ".join(sorted(p.name for p in links.glob("*.whl"))) or "none"
    print(f"pip {pip_version()}, CPython 3.11, --only-binary=:all:, {source}; "
          f"source-only dependencies offered as wheels built here: {built}")  # fmt: skip
    print("| platform | env | kind | plan | pip resolves | versions, or pip's error |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        plan_text = "planned" if row.planned == "planned" else "refused"
        what = "yes" if row.resolved else "no"
        if row.planned != "planned":
            what += f" ({' '.join(row.requirements)})"
        print(f"| {row.target} | {row.environment} | {row.kind} | {plan_text} | {what} | "
              f"{row.detail} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps([row.__dict__ for row in rows], indent=2) + "\n")
    # a planned environment that pip cannot resolve is a wrong plan
    return 1 if any(row.planned == "planned" and not row.resolved for row in rows) else 0


def pip_version() -> str:
    from importlib.metadata import version

    return version("pip")


if __name__ == "__main__":
    sys.exit(main())
