"""The folders a worker's dynamic loader must search in an environment whose framework
links CUDA libraries it does not find by itself.

MXNet's CUDA builds (``mxnet-cu112``) link ``libcudnn.so.8``, ``libcudart.so.11.0``,
``libcublas.so.11`` and six more, ship none of them, and carry no run path to where
PyPI's CUDA 11 wheels (``nvidia-cudnn-cu11`` and its siblings) put them
(``site-packages/nvidia/<library>/lib``). The set-up records those folders in the
environment, in ``.kbench-library-path`` (one folder a line, relative to the
environment), and whatever starts a worker there puts them in front of its
``LD_LIBRARY_PATH`` (:func:`loader_environment`); ``--check`` probes with the same.
Environments without the file (CPU builds, keras3: torch, TensorFlow and JAX find their
``nvidia-*`` libraries themselves) are left as they are. Nothing in site-packages changes,
so the environment's Python behaves for everything else as pip made it.

Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Mapping

LIBRARY_PATH_FILE = ".kbench-library-path"


def installed_library_folders(env_dir: Path) -> List[Path]:
    """The ``lib`` folders of the ``nvidia-*`` wheels installed in ``env_dir``."""
    found = sorted(Path(env_dir).glob("lib/python3*/site-packages/nvidia/*/lib"))
    found += sorted(Path(env_dir).glob("Lib/site-packages/nvidia/*/lib"))  # Windows
    return [folder for folder in found if folder.is_dir()]


def record_library_folders(env_dir: Path) -> List[Path]:
    """Write ``.kbench-library-path`` listing the installed ``nvidia-*`` lib folders;
    return them."""
    folders = installed_library_folders(env_dir)
    lines = [str(folder.relative_to(env_dir)) for folder in folders]
    (Path(env_dir) / LIBRARY_PATH_FILE).write_text("".join(f"{line}\n" for line in lines))
    return folders


def library_folders(env_dir: Path) -> List[Path]:
    """The folders recorded for ``env_dir`` (absolute); none without the file."""
    recorded = Path(env_dir) / LIBRARY_PATH_FILE
    if not recorded.is_file():
        return []
    lines = [line.strip() for line in recorded.read_text().splitlines() if line.strip()]
    return [Path(env_dir) / line for line in lines]


def loader_environment(env: Mapping[str, str], env_dir: Path) -> Dict[str, str]:
    """``env`` with ``env_dir``'s recorded library folders in front of ``LD_LIBRARY_PATH``
    (unchanged when it has none)."""
    result = dict(env)
    folders = [str(folder) for folder in library_folders(env_dir)]
    if folders:
        kept = [part for part in result.get("LD_LIBRARY_PATH", "").split(os.pathsep) if part]
        result["LD_LIBRARY_PATH"] = os.pathsep.join(folders + kept)
    return result
