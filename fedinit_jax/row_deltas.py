"""The durable record of a lazy client store (HostStore, DiskStore): one file of rows per
checkpoint, and a manifest per checkpoint that names and checksums them.

    <folder>/delta-<t>.npz   the rows written in the rounds after the previous checkpoint
                             and up to round t: ids [n] int64, rows [n, width] (the storage
                             dtype; bfloat16 as its uint16 bits), dtype (its name)

The manifest of checkpoint t is

    {"format": 1, "rows_held": M,
     "deltas": [{"file": "delta-5.npz", "bytes": ..., "sha256": ..., "rows": n}, ...]}

with one entry for every delta up to t; the binaries save it in the orbax checkpoint of
round t (its step metadata), so it is committed atomically with the server state. The rows
as they were after round t are the *fold* of its deltas: each id's row from the newest
delta holding it, and M = the number of ids the deltas hold. So a checkpoint's rows never
depend on what the store's working copy (host memory, the zarr array) holds after a kill,
nor on files written after it: restoring checkpoint t verifies its deltas (present, size,
sha256; StoreDamaged naming the file otherwise), rebuilds or repairs the working copy from
their fold, and removes the deltas of later rounds.

A checkpoint written before manifests existed (format absent) is restored from the deltas
<= t found in the folder, read but not checksummed.
"""
import hashlib
import io
import os
import re

import jax.numpy as jnp
import numpy as np

__all__ = ["FORMAT", "StoreDamaged", "delta_name", "delta_rounds", "remove_temporaries",
           "write_delta", "read_delta", "verify", "describe", "entries", "newest_first",
           "remove_after"]

FORMAT = 1
_DELTA = re.compile(r"^delta-(\d+)\.npz$")
_TEMPORARY = re.compile(r"^\.?delta-\d+\.(npz\.)?tmp")  # a write cut by a kill or a full disk


class StoreDamaged(ValueError):
    """A file of a client store's record is missing or damaged: the message names it."""


def delta_name(rounds_done: int) -> str:
    """The file name of the delta of the checkpoint after round `rounds_done`."""
    return f"delta-{rounds_done}.npz"


def delta_rounds(folder: str) -> list[int]:
    """The rounds of the deltas in folder, ascending (temporary files are not deltas)."""
    found = (_DELTA.match(name) for name in os.listdir(folder))
    return sorted(int(m.group(1)) for m in found if m)


def remove_temporaries(folder: str) -> None:
    """Delete the temporary files of delta writes that a kill or a full disk cut short."""
    for name in os.listdir(folder):
        if _TEMPORARY.match(name):
            os.remove(os.path.join(folder, name))


def write_delta(folder: str, rounds_done: int, ids: np.ndarray, rows: np.ndarray) -> dict:
    """Write folder/delta-<rounds_done>.npz (a temporary file renamed into place, synced).

    Args:
      folder: the store's record folder.
      rounds_done: the checkpoint's round t.
      ids: [n] the ids written since the previous checkpoint.
      rows: [n, width] their rows, in the storage dtype.
    Returns:
      The delta's manifest entry: {"file", "bytes", "sha256", "rows"}.
    """
    dtype = jnp.dtype(rows.dtype)
    stored = rows.view(np.uint16) if dtype == jnp.bfloat16 else rows
    buffer = io.BytesIO()
    np.savez(buffer, ids=np.asarray(ids, np.int64), rows=stored, dtype=np.array(dtype.name))
    data = buffer.getvalue()
    name = delta_name(rounds_done)
    tmp = os.path.join(folder, f".{name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(folder, name))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return {"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "rows": int(np.size(ids))}


def read_delta(folder: str, name: str, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(ids [n] int64, rows [n, width] in `dtype`) of one delta; StoreDamaged naming the file
    when it cannot be read."""
    path = os.path.join(folder, name)
    try:
        with np.load(path, allow_pickle=False) as delta:
            ids, rows = delta["ids"].astype(np.int64), delta["rows"]
    except Exception as err:  # noqa: BLE001 - zipfile, zlib, numpy and OS errors alike
        raise StoreDamaged(f"{path}: unreadable ({type(err).__name__}: "
                           f"{str(err).splitlines()[0][:120] if str(err) else ''})") from None
    dtype = jnp.dtype(dtype)
    if rows.dtype.kind in "uV" and rows.dtype.itemsize == dtype.itemsize:
        rows = rows.view(dtype)  # bfloat16's bits (and the raw void of older deltas)
    if rows.ndim != 2 or rows.shape[0] != ids.size:
        raise StoreDamaged(f"{path}: {ids.size} ids but rows of shape {rows.shape}")
    return ids, rows.astype(dtype)


def verify(folder: str, manifest: dict, rounds_done: int) -> None:
    """Every delta the manifest of checkpoint `rounds_done` names is there, of its size and
    sha256; StoreDamaged naming the first file that is not."""
    for entry in manifest["deltas"]:
        path = os.path.join(folder, entry["file"])
        if not os.path.exists(path):
            why = "is missing"
        elif os.path.getsize(path) != entry["bytes"]:
            why = f"has {os.path.getsize(path)} bytes, not {entry['bytes']}"
        elif _sha256(path) != entry["sha256"]:
            why = "has changed (sha256 differs)"
        else:
            continue
        raise StoreDamaged(
            f"{path} {why}: the checkpoint after round {rounds_done} needs it to rebuild the "
            "clients' rows, which exist nowhere else; restore the file, or move the workdir "
            "aside and rerun to start over")


def describe(folder: str, name: str) -> dict:
    """The manifest entry of an existing delta (one written before manifests existed)."""
    path = os.path.join(folder, name)
    with np.load(path, allow_pickle=False) as delta:
        rows = int(delta["ids"].size)
    return {"file": name, "bytes": os.path.getsize(path), "sha256": _sha256(path),
            "rows": rows}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def entries(folder: str, manifest, rounds_done: int) -> list[str]:
    """The delta files whose fold is the rows after round `rounds_done`, oldest first: the
    manifest's (verified), or for a checkpoint without one, the folder's deltas <= t."""
    if manifest is not None:
        verify(folder, manifest, rounds_done)
        return [entry["file"] for entry in manifest["deltas"]]
    return [delta_name(t) for t in delta_rounds(folder) if t <= rounds_done]


def newest_first(folder: str, names: list[str], dtype):
    """The fold, one delta at a time: yields (ids, rows) of the ids each delta holds that no
    newer one does, newest delta first (memory: one delta)."""
    seen = set()
    for name in reversed(names):
        ids, rows = read_delta(folder, name, dtype)
        # within one delta an id appears once (its rows are the journal's unique ids)
        fresh = np.array([i not in seen for i in ids.tolist()], bool)
        seen.update(ids.tolist())
        if fresh.any():
            yield ids[fresh], rows[fresh]


def remove_after(folder: str, rounds_done: int) -> None:
    """Delete the deltas of checkpoints after round `rounds_done` (never committed, or whose
    checkpoint is unreadable)."""
    for t in delta_rounds(folder):
        if t > rounds_done:
            os.remove(os.path.join(folder, delta_name(t)))
