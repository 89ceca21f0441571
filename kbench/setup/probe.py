"""What one Python environment's frameworks are, as one JSON document on stdout.

Run it with the environment's own interpreter; it needs nothing but the standard library
(not even kbench), so any Python 3.8+ can run it from any folder::

    ENV/bin/python kbench/setup/probe.py [FRAMEWORK ...] [--pretty]

It reads facts and judges nothing (``python3 -m kbench.setup --check`` does): ``python``;
``driver`` (the kernel module's version, the CUDA version libcuda supports, nvidia-smi);
``cuda_packages`` (each ``nvidia-*-cuNN`` / ``cuda-*`` distribution and its CUDA major);
``owned_twice`` (files in the RECORD of two distributions; ``identical`` when their
hashes agree); and ``frameworks``, each from a fresh child process (so that its loaded
libraries are its own): distribution, version, import error, ``build`` (CUDA and cuDNN
versions; ``cuda: null`` for a CPU build), its Requires-Dist (the CUDA libraries a build
asks for), the CUDA libraries loaded (path, owner,
version), the GPUs seen, and per native library what ``ldd`` cannot resolve. Exits 0
whenever it could write the document.
"""

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys

# run as a script, this folder is first on sys.path: its modules must not shadow others
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != HERE]

FRAMEWORKS = ("tensorflow", "jax", "torch", "mxnet")
# the framework's distributions, first match wins (what pip calls them)
DISTRIBUTIONS = {
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tf-nightly"),
    "jax": ("jax",),
    "torch": ("torch",),
    "mxnet": ("mxnet",),  # and mxnet-cu112 etc., matched by prefix
}
# per framework, the native libraries to check with ldd (globs inside site-packages)
NATIVE = {
    "tensorflow": ("tensorflow/*.so*", "tensorflow/python/_pywrap_tensorflow_internal.so"),
    "jax": ("jaxlib/*.so", "jax_plugins/*/*.so", "jax_cuda*_plugin/*.so"),
    "torch": ("torch/lib/*.so*",), "mxnet": ("mxnet/*.so*",),
}  # fmt: skip
CUDA_LIBRARY = re.compile(
    r"/(lib(cudart|cudnn[a-z_]*|cublas(Lt)?|nccl|cufft|cusolver|cusparse|curand|nvrtc|"
    r"nvToolsExt|nvJitLink|cupti|cuda|nvshmem[a-z_]*)\.so[.0-9]*)$"
)
CU_SUFFIX = re.compile(r"^(nvidia-.+|cuda-.+)-cu(\d+)$")
VERSIONED_BY_CUDA = ("cuda-toolkit", "cuda-bindings", "cuda-python")
DRIVER_FILE = "/proc/driver/nvidia/version"


def main(argv):
    pretty = "--pretty" in argv
    argv = [arg for arg in argv if arg != "--pretty"]
    report = probe_framework(argv[1]) if argv[:1] == ["--one"] else probe_environment(argv or None)
    print(json.dumps(report, indent=2 if pretty else None, sort_keys=True, default=str))
    return 0


def probe_environment(names=None):
    """The whole document; ``names``: frameworks to probe (default: those installed)."""
    dists = distributions()
    if names is None:
        names = [name for name in FRAMEWORKS if framework_distribution(name, dists)]
    return {
        "probe": 1,
        "python": {
            "version": ".".join(str(part) for part in sys.version_info[:3]),
            "executable": sys.executable, "prefix": sys.prefix,
        },
        "platform": sys.platform, "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
        "driver": driver(), "cuda_packages": cuda_packages(dists),
        "owned_twice": owned_twice(dists),
        "frameworks": {name: framework_in_child(name) for name in names},
    }  # fmt: skip


def distributions():
    """Installed distributions as {normalized name: distribution}, first on sys.path wins."""
    from importlib import metadata

    found = {}
    for dist in metadata.distributions():
        name = normalize(dist.metadata["Name"] or "")
        if name and name not in found:
            found[name] = dist
    return found


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def framework_distribution(name, dists):
    """The distribution that provides framework ``name`` (None: not installed)."""
    found = [candidate for candidate in DISTRIBUTIONS[name] if candidate in dists]
    if name == "mxnet":
        found += sorted(dist_name for dist_name in dists if dist_name.startswith("mxnet-cu"))
    return dists[found[0]] if found else None


def cuda_packages(dists):
    """The CUDA libraries pip installed: name, version, and their CUDA major version."""
    packages = []
    for name in sorted(dists):
        version = dists[name].version
        match = CU_SUFFIX.match(name)
        if match:
            packages.append({"name": name, "version": version, "cuda": match.group(2)})
        elif name in VERSIONED_BY_CUDA:  # cuda-toolkit 13.0.3 is CUDA 13
            packages.append({"name": name, "version": version, "cuda": version.split(".")[0]})
    return packages


def recorded_files(dist):
    """The files a distribution's RECORD lists (none where it has no readable RECORD)."""
    try:
        return dist.files or ()
    except (OSError, ValueError, TypeError):  # a broken RECORD is no reason to stop
        return ()


def owned_twice(dists):
    """Files in the RECORD of more than one distribution."""
    owners = {}
    for name, dist in sorted(dists.items()):
        for entry in recorded_files(dist):
            path = str(entry)
            if path.endswith(".pyc") or "/__pycache__/" in path:
                continue
            where = os.path.normpath(str(dist.locate_file(entry)))
            digest = entry.hash.value if entry.hash else None
            owners.setdefault(where, []).append((name, digest))
    twice = []
    for where, owned in sorted(owners.items()):
        names = sorted({name for name, _ in owned})
        if len(names) > 1:
            digests = {digest for _, digest in owned}
            identical = len(digests) == 1 and None not in digests
            twice.append({"file": where, "owners": names, "identical": identical})
    return twice


def driver():
    """The NVIDIA driver, as the kernel module, libcuda and nvidia-smi say."""
    facts = {"kernel_module": None, "cuda": None, "libcuda": None, "nvidia_smi": None}
    try:
        with open(DRIVER_FILE) as text:
            match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text.read())
        facts["kernel_module"] = match.group(1) if match else "unreadable"
    except OSError:
        pass
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
            facts["cuda"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
        facts["libcuda"] = "loaded"
    except (OSError, AttributeError) as err:
        facts["libcuda"] = str(err)
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        try:
            done = subprocess.run(query, capture_output=True, text=True, timeout=30)
            facts["nvidia_smi"] = (done.stdout or done.stderr).strip().splitlines()
        except (OSError, subprocess.SubprocessError) as err:
            facts["nvidia_smi"] = [str(err)]
    return facts


def framework_in_child(name):
    """probe_framework(name) in a fresh process of this interpreter."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, os.path.abspath(__file__), "--one", name]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    except subprocess.TimeoutExpired:
        return {"framework": name, "imported": False, "error": "the probe timed out (600 s)"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
    return {
        "framework": name, "imported": False,
        "error": f"the probe exited with {done.returncode}: {' | '.join(tail)}",
    }  # fmt: skip


def probe_framework(name):
    """Import framework ``name`` here and say what it is."""
    dists = distributions()
    dist = framework_distribution(name, dists)
    facts = {
        "framework": name, "distribution": normalize(dist.metadata["Name"]) if dist else None,
        "version": dist.version if dist else None, "imported": False, "error": None, "build": {},
        "gpus": None, "requires_dist": list(dist.requires or ()) if dist else [],
    }  # fmt: skip
    try:
        module = __import__(name)
        facts["imported"] = True
        facts["version"] = getattr(module, "__version__", facts["version"])
        facts["build"], facts["gpus"] = BUILDS[name](module, dists)
    except BaseException as err:  # noqa: BLE001 - an import can fail any way; report it
        facts["error"] = f"{type(err).__name__}: {err}".strip()
    if name == "mxnet" and dist is not None:  # also where mxnet does not import
        facts["build"]["cuda_from_name"] = mxnet_cuda_from_name(facts["distribution"])
    facts["loaded"] = loaded_cuda_libraries(dists)
    facts["native"] = unresolved_libraries(name)
    return facts


def mxnet_cuda_from_name(distribution):
    """``mxnet-cu112`` -> ``11.2``; None for the CPU build."""
    match = re.match(r"mxnet-cu(\d+)(\d)$", distribution or "")
    return f"{match.group(1)}.{match.group(2)}" if match else None


def torch_build(torch, dists):
    build = {"cuda": torch.version.cuda, "cudnn": None, "cudnn_loaded": None}
    if torch.version.cuda:
        try:
            compiled = torch._C._cudnn.getCompileVersion()
            build["cudnn"] = ".".join(str(part) for part in compiled)
        except (AttributeError, RuntimeError):
            pass
        try:
            build["cudnn_loaded"] = version_text(torch.backends.cudnn.version())
        except RuntimeError as err:  # a cuDNN that does not fit the build
            build["cudnn_loaded"] = f"RuntimeError: {err}"
    try:
        gpus = torch.cuda.device_count()
    except RuntimeError as err:
        gpus = f"RuntimeError: {err}"
    return build, gpus


def tensorflow_build(tf, dists):
    info = dict(tf.sysconfig.get_build_info())
    build = {
        "cuda": info.get("cuda_version") if info.get("is_cuda_build") else None,
        "cudnn": info.get("cudnn_version") if info.get("is_cuda_build") else None,
        "compute_capabilities": info.get("cuda_compute_capabilities"),
    }
    return build, len(tf.config.list_physical_devices("GPU"))


def jax_build(jax, dists):
    plugins = [name for name in sorted(dists) if re.match(r"jax-cuda\d+-(plugin|pjrt)$", name)]
    build = {
        "jaxlib": dists["jaxlib"].version if "jaxlib" in dists else None,
        "plugins": {name: dists[name].version for name in plugins}, "cuda": None, "cudnn": None,
    }  # fmt: skip
    majors = sorted({re.match(r"jax-cuda(\d+)", name).group(1) for name in plugins})
    build["cuda_major"] = majors[0] if len(majors) == 1 else (majors or None)
    try:
        from jax._src.lib import cuda_versions

        if cuda_versions is not None:
            build["cuda"] = version_text(cuda_versions.cuda_runtime_build_version())
            build["cudnn"] = version_text(cuda_versions.cudnn_build_version())
            build["cuda_loaded"] = version_text(cuda_versions.cuda_runtime_get_version())
            build["cudnn_loaded"] = version_text(cuda_versions.cudnn_get_version())
    except Exception as err:  # noqa: BLE001 - private API: report what it said
        build["versions_error"] = f"{type(err).__name__}: {err}"
    try:
        gpus = len(jax.devices("gpu"))
    except RuntimeError as err:  # "Unknown backend: 'gpu' requested, but no platforms ..."
        text = str(err)
        gpus = 0 if "no platforms that are instances of gpu" in text else f"RuntimeError: {text}"
    return build, gpus


def mxnet_build(mx, dists):
    features = mx.runtime.Features()
    build = {
        "cuda": features.is_enabled("CUDA"), "cudnn": features.is_enabled("CUDNN"),
        "nccl": features.is_enabled("NCCL"),
    }  # fmt: skip
    try:
        gpus = mx.context.num_gpus()
    except Exception as err:  # noqa: BLE001 - MXNetError without a driver
        gpus = f"{type(err).__name__}: {err}".splitlines()[0]
    return build, gpus


BUILDS = {"torch": torch_build, "tensorflow": tensorflow_build, "jax": jax_build,
          "mxnet": mxnet_build}  # fmt: skip


def version_text(number):
    """CUDA's 12080 -> ``12.8``; cuDNN's 91002 -> ``9.10.2`` (8902 -> ``8.9.2``)."""
    if not isinstance(number, int) or number <= 0:
        return None
    if number >= 90000:  # cuDNN 9: major*10000 + minor*100 + patch
        return f"{number // 10000}.{number // 100 % 100}.{number % 100}"
    if number < 10000 and number >= 7000:  # cuDNN 7, 8: major*1000 + minor*100 + patch
        return f"{number // 1000}.{number // 100 % 10}.{number % 100}"
    return f"{number // 1000}.{number % 1000 // 10}"  # CUDA


def loaded_cuda_libraries(dists):
    """The CUDA libraries this process has mapped, with owner and version."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "/" in line})
    except OSError:
        return None  # not Linux
    owners = {
        os.path.realpath(str(dist.locate_file(entry))): name
        for name, dist in dists.items()
        if name.startswith(("nvidia-", "cuda-", "torch", "tensorflow", "jax", "mxnet"))
        for entry in recorded_files(dist)
    }
    loaded = []
    for path in paths:
        match = CUDA_LIBRARY.search(path)
        if not match:
            continue
        entry = {"path": path, "owner": owners.get(os.path.realpath(path))}
        entry["version"] = library_version(path, match.group(2))
        loaded.append(entry)
    return loaded


def library_version(path, kind):
    """What the library says its version is (cuDNN, the CUDA runtime), else None."""
    try:
        library = ctypes.CDLL(path)
        if kind.startswith("cudnn") and hasattr(library, "cudnnGetVersion"):
            library.cudnnGetVersion.restype = ctypes.c_size_t
            return version_text(int(library.cudnnGetVersion()))
        if kind == "cudart":
            number = ctypes.c_int(0)
            if library.cudaRuntimeGetVersion(ctypes.byref(number)) == 0:
                return version_text(number.value)
    except (OSError, AttributeError):
        pass
    return None


def unresolved_libraries(name):
    """Per native library of the framework: what ``ldd`` cannot find."""
    ldd = shutil.which("ldd")
    if not ldd:
        return {"ldd": None}
    import glob
    import sysconfig

    found = {}
    for root in sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}):
        for pattern in NATIVE[name]:
            for path in sorted(glob.glob(os.path.join(root, pattern))):
                if os.path.isfile(path) and not os.path.islink(path):
                    found[os.path.relpath(path, root)] = path
    native = {}
    for relative, path in sorted(found.items()):
        try:
            done = subprocess.run([ldd, path], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as err:
            native[relative] = [f"ldd failed: {err}"]
            continue
        missing = [
            line.split("=>")[0].strip() for line in done.stdout.splitlines() if "not found" in line
        ]
        native[relative] = missing
    return native


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
