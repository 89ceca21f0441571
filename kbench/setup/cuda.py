"""CUDA facts the set-up plans and checks with (standard library only).

A wheel says which CUDA it is built for through the libraries it requires
(``nvidia-cudnn-cu12``, ``cuda-toolkit==13.0.3``) or its own name (``jax-cuda12-plugin``,
``mxnet-cu112``); :func:`cuda_majors` follows a requirement through the wheels' metadata
(``Requires-Dist``, extras included) and collects those majors: one environment must end
with one. Driver minimums are NVIDIA's (CUDA Toolkit release notes, Linux x86-64): a
driver runs every release of its own major version and older; a release's own driver is
needed only for features such as PTX JIT of newer code.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping, Optional, Sequence, Set, Tuple

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
    """Whether a Requires-Dist marker holds on Linux x86-64 with ``extras`` asked for.

    Understands what the CUDA wheels write: ``extra == "x"``, ``sys_platform``,
    ``platform_system`` and ``platform_machine`` comparisons joined by ``and``."""
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
    """Each requirement that pulls in CUDA mapped to its majors: one environment is
    fine when all of them together name one."""
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
