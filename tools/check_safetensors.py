#!/usr/bin/env python3
"""check_safetensors.py - reads a gputrain checkpoint with Python's safetensors, as PyTorch users
will, lists its tensors and metadata, and verifies every tensor against its "crc32.<name>".

Usage: python3 tools/check_safetensors.py CHECKPOINT [CHECKPOINT...]

Exits 0 when every file loads and every CRC matches, 1 on a mismatch or a missing CRC, 2 when a
file cannot be read at all. Needs the safetensors and numpy packages (pip install safetensors numpy).
"""
import sys
import zlib

FORMAT = "gputrain-1"


def check_file(path):
    """Returns the number of problems found in one checkpoint."""
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file

    tensors = load_file(path)
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
        names = list(f.keys())
    problems = 0
    if meta.get("format") != FORMAT:
        print(f"{path}: format is {meta.get('format')!r}, not {FORMAT!r}")
        problems += 1
    print(f"{path}: model {meta.get('model')} ({meta.get('optimizer')}, {meta.get('mode')}), "
          f"epoch {meta.get('epoch')} step {meta.get('step')} samples {meta.get('samples')}")
    for name in names:
        t = tensors[name]
        data = np.ascontiguousarray(t, dtype="<f4").tobytes()
        got = zlib.crc32(data) & 0xFFFFFFFF
        want = meta.get("crc32." + name)
        if want is None:
            status = "NO CRC"
            problems += 1
        elif int(want, 16) != got:
            status = f"CRC MISMATCH (file says {want}, data gives {got:08x})"
            problems += 1
        else:
            status = "ok"
        shape = "x".join(str(d) for d in t.shape) or "scalar"
        print(f"  {name:40s} {str(t.dtype):8s} {shape:16s} {status}")
    for key in meta:
        if key.startswith("crc32.") and key[6:] not in tensors:
            print(f"  {key} names no tensor")
            problems += 1
    return problems


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
        import safetensors  # noqa: F401
    except ImportError as exc:
        print(f"check_safetensors.py needs numpy and safetensors ({exc}): pip install safetensors numpy",
              file=sys.stderr)
        return 2
    worst = 0
    for path in argv[1:]:
        try:
            problems = check_file(path)
        except Exception as exc:  # safetensors raises its own error types for bad files
            print(f"{path}: cannot be read: {exc}", file=sys.stderr)
            worst = 2
            continue
        if problems:
            print(f"{path}: {problems} problem(s)")
            worst = max(worst, 1)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv))
