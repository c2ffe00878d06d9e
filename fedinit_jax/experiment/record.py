"""A checkpoint's record: what proves a restored checkpoint to be the one that was written.

Saved in the step's metadata (orbax's _CHECKPOINT_METADATA, its custom_metadata) beside the
run's config and the client store's manifest (fedinit_jax/row_deltas.py):

    {"format": 1, "round": t, "client_store": "host",
     "state": sha256 of the server state's checksums (state_digest),
     "rows": [row_digest(row) for the metrics rows 1..t],
     "last_row_trimmed": row_digest(row t without its evaluation fields),
     "sha256": sha256 of the config, the manifest and the fields above (metadata_digest)}

After a restore the state's digest is recomputed and compared, the metrics rows 1..t are
compared row by row, and the metadata itself is checked against its own sha256; any
difference makes the checkpoint as unusable as an unreadable one (resume.py falls back to
the previous checkpoint). `last_row_trimmed` accepts row t as a resume rewrites it when t
was the last round of a shorter run (its evaluation is not one of the longer run's).

The state's checksum works on any mesh: a leaf this process holds whole is summed in numpy
(no compilation), one sharded over processes (a [C, ...] client table of a multi-process
run) on the devices, without gathering it to one host. For each leaf, its raw
bits as unsigned words u_1..u_n (bfloat16 and uint8 widened, 64-bit split in two) give
s1 = sum_j u_j and s2 = sum_j j u_j, both mod 2^32 (a Fletcher checksum). One flipped bit
or one changed value changes s1; two values swapped change s2. The digest is the sha256 of
every leaf's path, shape, dtype, s1 and s2.
"""
import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["FORMAT", "Damaged", "state_digest", "row_digest", "make", "metadata_digest",
           "check_metadata", "first_row_differing"]

FORMAT = 1
_UNSIGNED = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}


class Damaged(ValueError):
    """A checkpoint (or the metrics rows it vouches for) is not what was written: the
    message says which file and why."""


def _words(x, xp):
    """A leaf's raw bits as a flat uint32 vector (xp: numpy or jax.numpy)."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if x.dtype == xp.bool_:
        return x.ravel().astype(xp.uint32)
    if xp is np:
        unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint32}[x.dtype.itemsize]
        return np.ascontiguousarray(x).view(unsigned).ravel().astype(np.uint32)
    if x.dtype.itemsize == 8:
        return jax.lax.bitcast_convert_type(x, jnp.uint32).ravel()
    return jax.lax.bitcast_convert_type(x, _UNSIGNED[x.dtype.itemsize]).ravel().astype(
        jnp.uint32)


def _sums(u, xp):
    j = xp.arange(1, u.size + 1, dtype=xp.uint32)
    return xp.stack([xp.sum(u, dtype=xp.uint32), xp.sum(u * j, dtype=xp.uint32)])


@jax.jit
def _sharded_checksums(x):
    return _sums(_words(x, jnp), jnp)


def _checksums(x):
    """(s1, s2) of one leaf: in numpy when this process holds all of it, else on the devices
    (a leaf sharded over processes: a jitted collective every process calls)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(_sharded_checksums(x).addressable_data(0), np.uint32)
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    with np.errstate(over="ignore"):
        return _sums(_words(np.asarray(x), np), np).astype(np.uint32)


def state_digest(tree) -> str:
    """The sha256 (hex) of a pytree of arrays' paths, shapes, dtypes and checksums (module
    doc). Every process of a multi-process run calls it together when a leaf is sharded
    over processes."""
    digest = hashlib.sha256()
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        digest.update(f"{jax.tree_util.keystr(path)}|{tuple(x.shape)}|{x.dtype}|".encode())
        digest.update(_checksums(x).tobytes())
    return digest.hexdigest()


def row_digest(row: dict) -> str:
    """16 hex digits of the sha256 of a metrics row as JSON with sorted keys."""
    return hashlib.sha256(json.dumps(row, sort_keys=True).encode()).hexdigest()[:16]


def make(rounds_done: int, state_sha: str, rows, trim, client_store: str | None) -> dict:
    """The record of the checkpoint after `rounds_done` (without its sha256: metadata_digest).

    Args:
      rounds_done: t, the checkpoint's round.
      state_sha: state_digest of the saved state.
      rows: the metrics rows 1..t as metrics.jsonl holds them.
      trim: row -> the row without its evaluation fields (resume.trimmed).
      client_store: the store that holds the clients' rows ("device", "host", "disk").
    """
    return {"format": FORMAT, "round": int(rounds_done), "client_store": client_store,
            "state": state_sha, "rows": [row_digest(r) for r in rows],
            "last_row_trimmed": row_digest(trim(rows[-1])) if rows else None}


def metadata_digest(metadata: dict) -> str:
    """The sha256 of a step's custom metadata (config, manifest, record) without the
    record's own "sha256" field."""
    record = {k: v for k, v in metadata.get("record", {}).items() if k != "sha256"}
    return hashlib.sha256(json.dumps({**metadata, "record": record}, sort_keys=True)
                          .encode()).hexdigest()


def check_metadata(metadata, path: str, rounds_done: int) -> dict:
    """The record of the checkpoint after `rounds_done` from its step metadata (as read from
    path), or Damaged saying what is wrong: no record, a record of another round or format,
    or metadata that differs from its sha256."""
    record = metadata.get("record") if isinstance(metadata, dict) else None
    if not isinstance(record, dict):
        raise Damaged(f"{path} holds no record of the checkpoint (config, state digest, "
                      "metrics digests): it was not written whole by this version")
    if record.get("format") != FORMAT or record.get("round") != rounds_done:
        raise Damaged(f"{path} records round {record.get('round')!r} (format "
                      f"{record.get('format')!r}), not round {rounds_done} (format {FORMAT})")
    if metadata_digest(metadata) != record.get("sha256"):
        raise Damaged(f"{path} differs from what was written (its sha256 does not match)")
    return record


def first_row_differing(record: dict, rows) -> int | None:
    """The first round r <= record's round whose metrics row is missing from `rows` or
    differs from the one the record vouches for, or None when rows 1..t are all as
    written."""
    digests = record["rows"]
    for r, expected in enumerate(digests, start=1):
        if r > len(rows):
            return r
        got = row_digest(rows[r - 1])
        if got != expected and not (r == len(digests)
                                    and got == record.get("last_row_trimmed")):
            return r
    return None
