#!/usr/bin/env python3
"""check_safetensors.py - reads a gputrain checkpoint as PyTorch users will (with Python's
safetensors package where it is installed, else with this script's own reader of the format), lists
its tensors and metadata, and checks every CRC gputrain writes: "header_crc32" (the length and the
header, with its own 8 digits read as "00000000") and "crc32.<name>" of every tensor (of its
little-endian bytes, whatever its dtype: F32, or an integer buffer such as batch norm's
num_batches_tracked).

Usage: python3 tools/check_safetensors.py CHECKPOINT [CHECKPOINT...]

Exit status: 0 when every file reads, is a current gputrain checkpoint and every CRC matches; 1 on a
mismatch, a missing CRC, another format or a file that cannot be read; 2 on a command-line error.
Needs numpy; safetensors is optional (python3 -m pip install safetensors).
"""
import json
import struct
import sys
import zlib

FORMAT = "gputrain-2"  # src/checkpoint.c, CKPT_FORMAT
OLD_FORMATS = {"gputrain-1": "an older gputrain's, without a header CRC; gputrain refuses it"}
CRC_KEY = "header_crc32"
MAX_HEADER = 100 << 20
# The dtypes a checkpoint may hold: parameters, optimizer state and running statistics are F32; a
# buffer such as batch norm's num_batches_tracked may be an integer, as PyTorch keeps it (int64).
DTYPES = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


class Unreadable(Exception):
    """A file that is not a safetensors file at all."""


def read_header(raw, path):
    """(header length, header bytes, header dict) of a safetensors file's bytes."""
    if len(raw) < 8:
        raise Unreadable(f"{path}: {len(raw)} bytes, too short for a safetensors file")
    n = struct.unpack("<Q", raw[:8])[0]
    if n > MAX_HEADER or 8 + n > len(raw):
        raise Unreadable(f"{path}: header length {n} does not fit the file's {len(raw)} bytes")
    try:
        return n, raw[8:8 + n], json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Unreadable(f"{path}: header is not JSON ({exc})") from None


def header_crc(n, header):
    """gputrain's header CRC: CRC-32 of the 8 length bytes and the header, its own digits as zeros;
    None when the header has no such value."""
    key = f'"{CRC_KEY}":"'.encode()
    at = header.find(key)
    if at < 0:
        return None
    hole = at + len(key)
    crc = zlib.crc32(struct.pack("<Q", n))
    crc = zlib.crc32(header[:hole], crc)
    crc = zlib.crc32(b"00000000", crc)
    return zlib.crc32(header[hole + 8:], crc) & 0xFFFFFFFF


def load_tensors(path, raw, n, header):
    """{name: numpy array}: by the safetensors package where it imports, else from the header's
    offsets; the name of the reader used."""
    import numpy as np
    try:
        from safetensors.numpy import load_file
    except ImportError:
        load_file = None
    if load_file is not None:
        return load_file(path), "safetensors"
    data, tensors = raw[8 + n:], {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        count = int(np.prod(info["shape"], dtype=np.int64))
        dt = DTYPES.get(info.get("dtype"))
        if dt is None or not 0 <= begin <= end <= len(data) or end - begin != int(dt[2]) * count:
            raise Unreadable(f"{path}: tensor {name}: not {', '.join(DTYPES)} {info['shape']} at bytes "
                             f"{begin}..{end}")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dt).reshape(info["shape"])
    return tensors, "own reader (safetensors not installed)"


def check_meta(path, n, header, meta):
    """Problems with the format and the header CRC, printed; returns their count."""
    problems = 0
    fmt = meta.get("format")
    if fmt in OLD_FORMATS:
        print(f"{path}: format {fmt!r} is {OLD_FORMATS[fmt]}")
        problems += 1
    elif fmt != FORMAT:
        print(f"{path}: format is {fmt!r}, not {FORMAT!r}: not a gputrain checkpoint")
        problems += 1
    want, got = meta.get(CRC_KEY), header_crc(n, header)
    if fmt == FORMAT and (want is None or got is None):
        print(f"{path}: no {CRC_KEY}")
        problems += 1
    elif want is not None and got is not None and got != int(want, 16):
        print(f"{path}: {CRC_KEY} MISMATCH (file says {want}, header gives {got:08x})")
        problems += 1
    return problems


def check_tensors(tensors, meta):
    """One line per tensor with its CRC's verdict, and CRCs that name no tensor; the problem count."""
    import numpy as np
    problems = 0
    for name in sorted(tensors):
        t = tensors[name]
        got = zlib.crc32(np.ascontiguousarray(t, dtype=t.dtype.newbyteorder("<")).tobytes()) & 0xFFFFFFFF
        want = meta.get("crc32." + name)
        if want is None:
            status = "NO CRC"
        elif int(want, 16) != got:
            status = f"CRC MISMATCH (file says {want}, data gives {got:08x})"
        else:
            status = "ok"
        problems += status != "ok"
        shape = "x".join(str(d) for d in t.shape) or "scalar"
        print(f"  {name:40s} {str(t.dtype):8s} {shape:16s} {status}")
    for key in meta:
        if key.startswith("crc32.") and key[6:] not in tensors:
            print(f"  {key} names no tensor")
            problems += 1
    return problems


def check_file(path):
    """Returns the number of problems found in one checkpoint."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise Unreadable(f"{path}: {exc.strerror}") from None
    n, header_bytes, header = read_header(raw, path)
    meta = header.get("__metadata__") or {}
    tensors, reader = load_tensors(path, raw, n, header)
    print(f"{path}: model {meta.get('model')} ({meta.get('optimizer')}, {meta.get('mode')}), "
          f"epoch {meta.get('epoch')} step {meta.get('step')} samples {meta.get('samples')}; read by {reader}")
    return check_meta(path, n, header_bytes, meta) + check_tensors(tensors, meta)


def main(argv):
    if len(argv) >= 2 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(argv) < 2 or argv[1].startswith("--"):
        print(f"check_safetensors.py: {'no checkpoint given' if len(argv) < 2 else 'unknown option ' + repr(argv[1])}"
              " (see --help)", file=sys.stderr)
        return 2
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("check_safetensors.py needs numpy: python3 -m pip install numpy (or bash tools/deps.sh)", file=sys.stderr)
        return 1
    worst = 0
    for path in argv[1:]:
        try:
            problems = check_file(path)
        except Unreadable as exc:
            print(f"check_safetensors.py: {exc}", file=sys.stderr)
            worst = 1
            continue
        except Exception as exc:  # safetensors raises its own error types for bad files
            print(f"check_safetensors.py: {path}: cannot be read: {exc}", file=sys.stderr)
            worst = 1
            continue
        if problems:
            print(f"{path}: {problems} problem(s)")
            worst = 1
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv))
