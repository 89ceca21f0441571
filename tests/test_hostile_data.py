"""The store and the user's data against a hostile or careless user (issue 30).

1. ``kbench results --merge`` writes only inside the store: a document's run_id of
   ``..``, an absolute path, NUL or a very long name is refused, nothing is overwritten,
   and "N runs added" is what is then listed; a folder that is not a store is refused
   and nothing is written into it.
2. Pickled data files (CIFAR batches, the word lists of ``imdb.npz``) are read with a
   restricted unpickler: a planted pickle runs nothing and the error names the file;
   the real formats (Python 2 and 3 pickles) still load.
6. NaN anywhere in x, values out of range anywhere (not only in the first million),
   labels of one class: refused (exit 2) before any worker starts.
7. A truncated npz, or one with a bad CRC: exit 2 with a message, no traceback.
9. Image folders: hidden folders are not classes; an empty class folder, a link out of
   the data folder and a validation class that training lacks are refused with their
   names; an image that cannot be decoded is named.

All fast: pure Python against the real code; the CLI in-process where exit 2 is the
point, and as a process once where the store's listing is.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
from conftest import kbench_here
from PIL import Image
from shared_sweep import image_folder
from test_datasets import write_cifar
from test_store import result

from kbench import cli, datasets
from kbench.datasets import readers
from kbench.datasets.sources import DataUnavailable
from kbench.datasets.stream import StreamedImages, UnreadableImage, scan
from kbench.results.store import INDEX_NAME, ResultStore, StoreError

MODELS_DIR = Path(__file__).resolve().parent / "user_models"
RESIDUAL = MODELS_DIR / "residual.py"  # takes 8x8x1 images, 4 classes


def run_cli(capsys, args):
    """``kbench ARGS`` in this process: (exit code, stderr)."""
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    return info.value.code, capsys.readouterr().err


def files_under(folder: Path) -> set:
    return {p for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


# 1. a merged store writes only inside itself ---------------------------------------


def hostile_documents(source: Path, outside: Path) -> dict:
    """A store with one good document and documents whose run_id tries to get out."""
    ResultStore(source).add(result("good1", "jax", 10.0))
    run_ids = {
        "dotdot": "../../escaped",
        "absolute": str(outside / "absolute"),
        "nul": "a\x00b",
        "long": "L" * 300,
        "hidden": ".hidden",
    }
    for name, run_id in run_ids.items():
        document = result("x", "torch", 20.0).to_dict()
        document["run_id"] = run_id
        (source / f"{name}.json").write_text(json.dumps(document))
    return run_ids


def test_merge_refuses_run_ids_that_leave_the_store_and_counts_what_it_added(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    source, target = tmp_path / "src", tmp_path / "a" / "b" / "store"
    hostile_documents(source, outside)
    # a document here whose file name is the run id of a source document, but which
    # holds another run: merging must not overwrite it
    ResultStore(target).add(result("keep9", "jax", 1.0))
    (target / "keep9.json").rename(target / "good2.json")
    ResultStore(source).add(result("good2", "torch", 30.0))
    before = files_under(tmp_path)

    done = kbench_here(["results", "--store", str(target), "--merge", str(source)],
                      tmp_path / "home")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "1 runs added, 0 already there; 6 refused" in done.stdout, done.stdout
    for name in ("dotdot", "absolute", "nul", "long", "hidden"):
        assert f"{source / name}.json: not merged: run_id" in done.stderr, done.stderr
    assert "good2.json exists and is not run good2" in done.stderr
    # nothing was written outside the store (nor anywhere under tmp_path but in it)
    new = {p for p in files_under(tmp_path) - before if "home" not in p.relative_to(tmp_path).parts}
    assert new and all(target in p.parents for p in new), sorted(map(str, new))
    assert not (tmp_path / "a" / "escaped.json").exists()
    assert not (outside / "absolute.json").exists()
    assert ResultStore(target).results()[0].run_id in ("good1", "keep9")
    listed = kbench_here(["results", "--store", str(target)], tmp_path / "home")
    assert "2 runs in" in listed.stdout, listed.stdout  # keep9 (as good2.json) and good1
    assert {e.run_id for e in ResultStore(target).entries()} == {"good1", "keep9"}


def test_a_store_never_writes_a_run_id_that_is_not_a_file_name_in_it(tmp_path):
    for run_id in ("../x", "/tmp/x", "a/b", "a\x00b", "L" * 201, ".x", ".."):
        with pytest.raises(StoreError, match="run_id"):
            ResultStore(tmp_path / "s").add(result(run_id, "jax", 1.0))
    assert not (tmp_path / "x.json").exists()
    ResultStore(tmp_path / "s").add(result("2026-01-01T000000Z-jax-mlp.py-ab12cd", "jax", 1.0))


def test_a_folder_that_is_not_a_store_is_refused_and_left_alone(tmp_path, capsys):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "package.json").write_text('{"name": "x"}')
    (folder / "tsconfig.json").write_text("{not json")
    before = files_under(folder)
    code, err = run_cli(capsys, ["results", "--store", str(folder)])
    assert code == 2, err
    assert f"{folder} has no {INDEX_NAME} and none of its 2 .json files is a kbench result" in err
    assert "package.json: expected a kbench result document" in err
    assert "Point --store at the directory a run or sweep wrote to" in err
    # merging into it, or from it, is refused as well, before anything is written
    store = tmp_path / "s"
    ResultStore(store).add(result("a1", "jax", 1.0))
    store_before = files_under(store)
    for args in (["--store", str(folder), "--merge", str(store)],
                 ["--store", str(store), "--merge", str(folder)]):  # fmt: skip
        code, err = run_cli(capsys, ["results", *args])
        assert code == 2 and "none of its 2 .json files is a kbench result" in err, err
    assert files_under(folder) == before  # no index.jsonl, no .lock, no logs/
    assert files_under(store) == store_before
    # an empty folder is a store yet to be written: listed, nothing written
    (tmp_path / "empty").mkdir()
    code = cli.main(["results", "--store", str(tmp_path / "empty")])
    assert code == 0 and "0 runs in" in capsys.readouterr().out
    assert not list((tmp_path / "empty").iterdir())


# 2. pickles run nothing --------------------------------------------------------------


class Planted:
    """A pickle that, when loaded without care, calls ``call(*args)``."""

    def __init__(self, call, args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


def planted_batches(directory: Path, payload) -> Path:
    """cifar-10-batches-py with a real-looking batch 1 that carries ``payload``."""
    write_cifar(directory, "cifar-10")
    batch = directory / "cifar-10-batches-py" / "data_batch_1"
    with open(batch, "wb") as handle:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1],
                     b"batch_label": payload}, handle)  # fmt: skip
    return batch


@pytest.mark.parametrize("kind", ["open", "system"])
def test_a_planted_cifar_pickle_runs_nothing_and_is_named(tmp_path, kind):
    marker = tmp_path / "pwned"
    payload = Planted(open, (str(marker), "w")) if kind == "open" \
        else Planted(os.system, (f"touch {marker}",))  # fmt: skip
    batch = planted_batches(tmp_path / "d", payload)
    with pytest.raises(DataUnavailable) as caught:
        datasets.prepare("cifar10", tmp_path / "out", data_dir=str(tmp_path / "d"))
    assert not marker.exists()
    message = str(caught.value)
    assert str(batch) in message and "restricted unpickler" in message, message
    assert ("io.open" if kind == "open" else "posix.system") in message, message


def test_a_planted_pickle_in_a_cifar_archive_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    planted_batches(tmp_path / "d", Planted(open, (str(marker), "w")))
    with tarfile.open(tmp_path / "d" / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "d" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    for path in (tmp_path / "d" / "cifar-10-batches-py").iterdir():
        path.unlink()
    (tmp_path / "d" / "cifar-10-batches-py").rmdir()
    with pytest.raises(DataUnavailable, match="cifar-10-python.tar.gz:cifar-10-batches-py/data_"):
        datasets.prepare("cifar10", tmp_path / "out", data_dir=str(tmp_path / "d"))
    assert not marker.exists()


def test_the_cli_refuses_a_planted_pickle_with_exit_2(tmp_path, capsys):
    marker = tmp_path / "pwned"
    planted_batches(tmp_path / "d", Planted(open, (str(marker), "w")))
    code, err = run_cli(capsys, ["run", "-b", "jax", "-m", "mlp", "--dataset", "cifar10",
                                 "--data-dir", str(tmp_path / "d"), "--steps", "1",
                                 "--store", str(tmp_path / "out")])  # fmt: skip
    assert code == 2 and "data_batch_1: not read" in err and "Traceback" not in err, err
    assert not marker.exists() and not (tmp_path / "out").exists()


class Py2Pickler(pickle._Pickler):
    """Writes bytes and strings as Python 2's ``str`` (BINSTRING), as the published
    CIFAR batches were written by Python 2's cPickle at protocol 2."""

    def save_bytes(self, obj):
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", n) + obj)
        self.memoize(obj)

    def save_str(self, obj):
        self.save_bytes(obj.encode("latin1"))

    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[bytes] = save_bytes
    dispatch[str] = save_str


def python2_pickle(obj) -> bytes:
    buffer = io.BytesIO()
    Py2Pickler(buffer, protocol=2).dump(obj)
    # numpy 1's module name, as Python 2's numpy wrote it
    return buffer.getvalue().replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")


WRITERS = {
    "python2": python2_pickle,
    "protocol2": lambda batch: pickle.dumps(batch, protocol=2),  # bytes via _codecs.encode
    "default": pickle.dumps,
    "protocol5": lambda batch: pickle.dumps(batch, protocol=5),  # numpy's _frombuffer
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_real_cifar_batches_still_load(tmp_path, writer):
    rng = np.random.default_rng(3)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"batch_label": f"{name} of 5".encode(),
                 b"labels": rng.integers(0, 10, 3).tolist(),
                 b"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8),
                 b"filenames": [b"leptodactylus_pentadactylus_s_000004.png"] * 3}  # fmt: skip
        raw = WRITERS[writer](batch)
        if writer == "python2":
            assert b"numpy.core.multiarray\n_reconstruct" in raw and b"U\x06labels" in raw
        (folder / name).write_bytes(raw)
        written[name] = batch
    arrays = readers.cifar(tmp_path, "cifar-10")
    rows = np.concatenate([written[f"data_batch_{i}"][b"data"] for i in range(1, 6)])
    planes = rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(arrays["x_train"], planes)
    labels = sum((written[f"data_batch_{i}"][b"labels"] for i in range(1, 6)), [])
    np.testing.assert_array_equal(arrays["y_train"], labels)
    np.testing.assert_array_equal(arrays["y_test"], written["test_batch"][b"labels"])


def test_a_planted_imdb_npz_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    reviews = np.empty(2, dtype=object)
    reviews[0], reviews[1] = [1, 2, 3], Planted(open, (str(marker), "w"))
    np.savez(tmp_path / "imdb.npz", x_train=reviews, y_train=np.array([0, 1]),
             x_test=reviews, y_test=np.array([1, 0]))  # fmt: skip
    with pytest.raises(DataUnavailable, match="imdb.npz:x_train.npy: not read"):
        datasets.prepare("imdb", tmp_path / "out", data_dir=str(tmp_path))
    assert not marker.exists()


# 6. degenerate data ------------------------------------------------------------------


def images(n: int, dtype=np.uint8, classes: int = 4) -> dict:
    rng = np.random.default_rng(0)
    scale = 255 if np.issubdtype(dtype, np.integer) else 1.0
    return {"x": (rng.random((n, 8, 8, 1)) * scale).astype(dtype),
            "y": np.arange(n) % classes}  # fmt: skip


def write_npz(path: Path, train: dict, test: dict) -> Path:
    np.savez(path, x_train=train["x"], y_train=train["y"], x_test=test["x"], y_test=test["y"])
    return path


def refused(capsys, tmp_path, data: Path, *expected: str) -> str:
    out = tmp_path / "out"
    code, err = run_cli(capsys, ["run", "-b", "jax", "-m", str(RESIDUAL), "--dataset",
                                 f"npz:{data}", "--store", str(out)])  # fmt: skip
    assert code == 2, err
    assert "Traceback" not in err
    for part in expected:
        assert part in err, err
    assert not out.exists()  # before any worker
    return err


def test_nan_in_x_is_refused_with_the_count_and_where(tmp_path, capsys):
    train = images(64, np.float32)
    train["x"][5, 1, 1, 0] = train["x"][40, 2, 2, 0] = np.nan
    train["x"][41, 0, 0, 0] = np.inf
    data = write_npz(tmp_path / "d.npz", train, images(16, np.float32))
    refused(capsys, tmp_path, data, "finite numbers in x_train; it holds 2 NaN and 1 infinite",
            "samples 5, 40, 41", "would silently become 0")  # fmt: skip
    all_nan = images(64, np.float32)
    all_nan["x"][:] = np.nan
    data = write_npz(tmp_path / "n.npz", all_nan, images(16, np.float32))
    refused(capsys, tmp_path, data, "in x_train; it holds 4096 NaN values")


@pytest.mark.parametrize("dtype, bad", [(np.int32, 300), (np.float32, 1.5), (np.int64, -1)])
def test_values_out_of_range_past_the_first_million_are_refused(tmp_path, capsys, dtype, bad):
    train = images(16_000, dtype)  # 1,024,000 values
    train["x"][-1, 7, 7, 0] = bad
    data = write_npz(tmp_path / "d.npz", train, images(16, dtype))
    refused(capsys, tmp_path, data, "uint8 0-255 or floats in [0, 1]", f"{bad:g}")


def test_one_class_is_refused(tmp_path, capsys):
    train, test = images(64), images(16)
    train["y"][:] = 2
    data = write_npz(tmp_path / "d.npz", train, test)
    refused(capsys, tmp_path, data, "y_train holds one class only (label 2, all 64 samples)",
            "measures nothing")  # fmt: skip
    with pytest.raises(DataUnavailable, match="found one, 'n01'.*measures nothing"):
        scan(one_class_folder(tmp_path / "one"), name="folder")


def one_class_folder(root: Path) -> Path:
    for split in ("train", "val"):
        (root / split / "n01").mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (4, 4), (i, 0, 0)).save(root / split / "n01" / f"{i}.png")
    return root


# 7. damaged npz files ----------------------------------------------------------------


def test_a_truncated_npz_exits_2(tmp_path, capsys):
    data = write_npz(tmp_path / "d.npz", images(64), images(16))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    refused(capsys, tmp_path, data, f"npz {data}: expected a numpy .npz archive",
            "truncated or damaged")  # fmt: skip


def test_an_npz_with_a_bad_crc_exits_2(tmp_path, capsys):
    train = images(64)
    data = write_npz(tmp_path / "d.npz", train, images(16))
    raw = data.read_bytes()
    at = raw.index(train["x"].tobytes()) + 100
    data.write_bytes(raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1 :])
    refused(capsys, tmp_path, data, "BadZipFile", "Bad CRC-32", "truncated or damaged")


def test_a_damaged_mnist_npz_in_data_dir_is_named(tmp_path):
    x = np.zeros((5, 28, 28), np.uint8)
    np.savez(tmp_path / "mnist.npz", x_train=x, y_train=np.arange(5), x_test=x[:2],
             y_test=np.arange(2))  # fmt: skip
    raw = (tmp_path / "mnist.npz").read_bytes()
    (tmp_path / "mnist.npz").write_bytes(raw[: len(raw) - 40])
    with pytest.raises(DataUnavailable, match=f"{tmp_path / 'mnist.npz'}: not a readable .npz"):
        datasets.prepare("mnist", tmp_path / "out", data_dir=str(tmp_path))


# 9. image folders --------------------------------------------------------------------


def test_hidden_folders_and_files_are_not_data(tmp_path):
    root = image_folder(tmp_path / "images")
    for split in ("train", "val"):
        checkpoints = root / split / ".ipynb_checkpoints"
        checkpoints.mkdir()
        Image.new("RGB", (4, 4)).save(checkpoints / "x-checkpoint.png")
    (root / "train" / "n01" / "._n01_0.png").write_bytes(b"\x00\x05\x16\x07AppleDouble")
    listing = scan(root, name="folder")
    assert listing.classes == ["n01", "n02", "n03"]
    assert len(listing.train) == 3 * 8 and len(listing.test) == 3 * 2
    assert not [p for p, _ in listing.train + listing.test if "/." in p]


def test_an_empty_class_folder_is_refused_with_its_name(tmp_path):
    root = image_folder(tmp_path / "images")
    (root / "train" / "n04").mkdir()
    with pytest.raises(DataUnavailable, match="hold no image .*: n04. Each would be a class"):
        scan(root, name="folder")
    flat = image_folder(tmp_path / "flat", split=False)
    (flat / "n00").mkdir()
    with pytest.raises(DataUnavailable, match="hold no image .*: n00"):
        scan(flat, name="folder")


def test_a_link_out_of_the_data_folder_is_not_a_class(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    (root / "train" / "etc").symlink_to("/etc")
    with pytest.raises(DataUnavailable, match="links that lead out of it: etc -> /etc"):
        scan(root, name="folder")
    out = tmp_path / "out"
    code, err = run_cli(capsys, ["run", "-b", "jax", "-m", str(RESIDUAL), "--dataset",
                                 f"folder:{root}", "--store", str(out)])  # fmt: skip
    assert code == 2 and "etc -> /etc" in err and "Traceback" not in err, err
    assert not out.exists()
    # a link that stays inside the data folder is followed
    (root / "train" / "etc").unlink()
    (root / "train" / "n04").symlink_to(root / "train" / "n01")
    assert scan(root, name="folder").classes == ["n01", "n02", "n03", "n04"]


def test_a_validation_class_missing_from_training_is_refused(tmp_path):
    root = image_folder(tmp_path / "images")
    for name in ("zebra", "n00"):
        (root / "val" / name).mkdir()
        Image.new("RGB", (4, 4)).save(root / "val" / name / "z.png")
    with pytest.raises(DataUnavailable, match=r"these are not: n00, zebra\. A model trained"):
        scan(root, name="folder")


def test_an_image_that_cannot_be_decoded_is_named(tmp_path):
    good, bad = tmp_path / "good.png", tmp_path / "bad.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(good)
    bad.write_bytes(good.read_bytes()[:200])  # truncated
    images_ = StreamedImages(np.array([str(good), str(bad)]), (8, 8))
    assert images_[0:1].shape == (1, 8, 8, 3)
    with pytest.raises(UnreadableImage, match=f"{bad}: not a readable image"):
        images_[0:2]
