"""The on-disk cache of compiled programs (docs/compile.md, "Cache").

Entries are opaque bytes (a serialized program) under a key: the content hash
of everything the program depends on (`program_key`). A second process that
compiles the same graph reads the entry instead of compiling again.

Layout: `<dir>/<key[:2]>/<key>.prog`, each file a 64-byte header (magic, entry
format version, payload length, SHA-256 of the payload) and the payload.
Writes go to a temporary file in the same folder, then `os.replace` puts it in
place: readers see a whole entry or none, and concurrent writers of one key
(who write the same bytes) simply replace each other. A file that is
truncated, corrupt or of another format version is reported, removed and
treated as a miss, never a crash; a directory that cannot be written makes the
cache in-memory only, with one warning.

The directory: TORCHNEURON_CACHE_DIR, else `$XDG_CACHE_HOME/torchneuron/compile`
(`~/.cache/torchneuron/compile`). TORCHNEURON_CACHE_DIR=off disables the disk.

Entries also reach PyTorch's portable caches: every entry read or written is
recorded as a "neuron_program" artifact, so `torch.compiler.save_cache_artifacts()`
carries it and `load_cache_artifacts()` in another process writes it to that
process's cache directory (artifact type registered by compile/registration.py).
"""
import functools
import hashlib
import json
import os
import struct
import sys
import tempfile
import threading
import warnings
from pathlib import Path

MAGIC = b"TNPROG\0\0"
ENTRY_VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")  # magic, entry version, payload length, sha256
HEADER_SIZE = 64
ARTIFACT_TYPE = "neuron_program"

_lock = threading.Lock()
_warned: set[str] = set()


def cache_dir() -> Path | None:
    """The cache's directory, or None when TORCHNEURON_CACHE_DIR=off."""
    value = os.environ.get("TORCHNEURON_CACHE_DIR", "").strip()
    if value.lower() == "off":
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchneuron" / "compile"


def _extension_identity() -> str:
    """Which build of the extension this is: its file's size and modification
    time (a rebuild changes the compiler and kernels without changing any version
    string). Cheap: no hashing of the file."""
    from .. import _C

    st = os.stat(_C.__file__)
    return f"{os.path.basename(_C.__file__)}:{st.st_size}:{st.st_mtime_ns}"


_environment = None


def environment() -> dict:
    """What every key includes besides the graph: versions of torch, torchneuron
    and the extension build, the entry format, the CPU features the kernels
    were chosen for, and what the compiler was told of the target (whether it
    has a mixed-precision GEMM)."""
    global _environment
    if _environment is None:
        import torch

        import torchneuron
        from torchneuron import _C

        _environment = {
            "torch": torch.__version__,
            "torchneuron": torchneuron.__version__,
            "extension": _extension_identity(),
            "entry_version": ENTRY_VERSION,
            "kernel_isa": torchneuron.kernel_isa(),
            "isas": list(torchneuron.supported_kernel_isas()),
            "target": _C._compile_target(),
            "python": sys.version_info[:2],
        }
    return _environment


@functools.cache
def _sources_identity() -> str:
    """The compile package's Python files (size and time of each): they make the
    program text that AOTAutograd's cache entries hold (output_code.py)."""
    here = Path(__file__).parent
    return ";".join(f"{p.name}:{st.st_size}:{st.st_mtime_ns}"
                    for p in sorted(here.glob("*.py")) for st in [p.stat()])


def backend_identity(mode: str) -> str:
    """What an AOTAutograd cache entry of this backend depends on besides the
    Dynamo graph: put into that cache's key (backend.py)."""
    return json.dumps({"backend": "neuron", "mode": mode, "environment": environment(),
                       "sources": _sources_identity()}, sort_keys=True, default=str)


def program_key(graph: bytes, options: dict) -> str:
    """The content hash naming a program: the serialized graph (with its inputs'
    roles, dtypes and layouts), the options that change the program, and the
    environment()."""
    h = hashlib.sha256()
    h.update(graph)
    h.update(json.dumps({"options": options, "environment": environment()}, sort_keys=True,
                        default=str).encode())
    return h.hexdigest()


def _entry_path(directory: Path, key: str) -> Path:
    if len(key) < 3 or not all(c in "0123456789abcdef" for c in key):
        raise ValueError(f"[neuron] compile cache: malformed key {key!r} (expected a hex digest)")
    return directory / key[:2] / f"{key}.prog"


def encode_entry(payload: bytes) -> bytes:
    header = _HEADER.pack(MAGIC, ENTRY_VERSION, len(payload), hashlib.sha256(payload).digest())
    return header.ljust(HEADER_SIZE, b"\0") + payload


def decode_entry(data: bytes) -> bytes:
    """The payload of an entry file's bytes; ValueError saying what is wrong."""
    if len(data) < HEADER_SIZE:
        raise ValueError(f"truncated header ({len(data)} of {HEADER_SIZE} bytes)")
    magic, version, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("not a program cache entry (bad magic)")
    if version != ENTRY_VERSION:
        raise ValueError(f"entry format version {version}, this build reads {ENTRY_VERSION}")
    payload = data[HEADER_SIZE:]
    if len(payload) != length:
        raise ValueError(f"truncated payload ({len(payload)} of {length} bytes)")
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("payload checksum mismatch (corrupt entry)")
    return payload


def _warn_once(what: str, message: str) -> None:
    with _lock:
        if what in _warned:
            return
        _warned.add(what)
    warnings.warn(message, stacklevel=3)


def load(key: str, directory: Path | None = None) -> tuple[bytes | None, str | None]:
    """(payload, None) on a hit; (None, why) on a miss, where `why` names a bad
    entry that was found and removed (None when there was no entry)."""
    directory = cache_dir() if directory is None else directory
    if directory is None:
        return None, None
    path = _entry_path(directory, key)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no entry, or no cache folder at all
        return None, None
    except OSError as exc:
        _warn_once(f"read:{directory}", f"[neuron] compile cache: cannot read {path}: {exc}; compiling")
        return None, f"unreadable entry: {exc}"
    try:
        payload = decode_entry(data)
    except ValueError as exc:
        why = f"bad entry {path.name}: {exc}; removed, compiling again"
        try:
            path.unlink()
        except OSError:
            pass
        warnings.warn(f"[neuron] compile cache: {why}", stacklevel=2)
        return None, why
    _record_artifact(key, payload)
    return payload, None


def store(key: str, payload: bytes, directory: Path | None = None) -> bool:
    """Writes the entry atomically; False (with one warning per directory) if
    the directory cannot be written: the program then lives in memory only."""
    directory = cache_dir() if directory is None else directory
    if directory is None:
        return False
    path = _entry_path(directory, key)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(encode_entry(payload))
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        _warn_once(f"write:{directory}", f"[neuron] compile cache: cannot write to {directory}: {exc}; "
                   "programs are kept in memory only (set TORCHNEURON_CACHE_DIR to a writable folder)")
        return False
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    _record_artifact(key, payload)
    return True


def _record_artifact(key: str, payload: bytes) -> None:
    """Hands the entry to PyTorch's portable cache (save_cache_artifacts) if
    that machinery is loaded (Dynamo loads it; without Dynamo no program is
    compiled)."""
    manager = sys.modules.get("torch.compiler._cache")
    if manager is None or ARTIFACT_TYPE not in manager.CacheArtifactFactory._artifact_types:
        return
    manager.CacheArtifactManager.record_artifact(ARTIFACT_TYPE, key, payload)


def register_artifact_type(module) -> None:
    """Registers the "neuron_program" artifact with torch.compiler._cache (called
    by compile/registration.py when that module is imported)."""

    class NeuronProgramArtifact(module.CacheArtifact):
        """A program cache entry carried by save_cache_artifacts()."""

        def populate_cache(self) -> None:
            store(self.key, self.content)

        @staticmethod
        def type() -> str:
            return ARTIFACT_TYPE

    if ARTIFACT_TYPE not in module.CacheArtifactFactory._artifact_types:
        module.CacheArtifactFactory.register(NeuronProgramArtifact)
