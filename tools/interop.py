#!/usr/bin/env python3
"""interop.py - checkpoints interchange with PyTorch, checked to the last test sample.

    python3 tools/interop.py to-torch CHECKPOINT --data DIR [--ref tools/torch_lenet.py]
        Loads a gputrain lenet5 checkpoint into the reference PyTorch LeNet5 (load_state_dict,
        strict) and evaluates it on the test set; prints the number of correct samples. Compare
        with `gputrain eval --checkpoint CHECKPOINT`. As gputrain eval does, it takes the moving
        average's parameters (ema.* tensors) where the checkpoint has them and the checkpoint's
        input step: x/255, normalised per channel where its metadata "input_norm" says so (the
        file is read, checked and turned into inputs by tools/gputrain_torch.py).

    python3 tools/interop.py from-torch OUT.safetensors --data DIR [--ref tools/torch_lenet.py] [--epochs N]
                                  [--normalize auto|none]
        Trains the reference PyTorch LeNet5 (SGD lr 0.05 momentum 0.9, batch 64) for N epochs,
        evaluates it, and saves its state_dict as a gputrain checkpoint (PyTorch names and layouts,
        gputrain metadata, format gputrain-2: a CRC-32 per tensor and one of the header; mode sync,
        one process's SGD) that `gputrain eval` reads; prints the number of correct samples
        PyTorch counted. --normalize is gputrain's and the reference's: auto (default) trains and
        evaluates on (x/255 - mean) / std with the training split's per-channel statistics and
        writes them to the checkpoint's metadata "input_norm" ("M/S", as gputrain does), so that
        `gputrain eval` feeds the weights the inputs they were trained on; none: x/255, no
        input_norm.

Both print one line "correct N of M (acc A)" (the input step on stderr). Needs torch and numpy
(the GPU host has them; the checkpoint is read and written here, no safetensors package); runs on
the GPU when there is one.
"""
import argparse
import importlib.util
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gputrain_torch  # noqa: E402 (checkpoint reading and gputrain's input step)

LENET5_SPEC = ("init:torch conv:6:5:0 relu avgpool:2 conv:16:5:0 relu avgpool:2 "
               "fc:120 relu fc:84 relu fc:10")


def load_reference(path):
    spec = importlib.util.spec_from_file_location("torch_lenet", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_checkpoint(path, tensors, meta):
    """A gputrain checkpoint (format gputrain-2, the one gputrain reads) of float32 numpy tensors
    {name: array} with string metadata meta: safetensors, tensors in name order, a CRC-32 per tensor
    ("crc32.<name>") and header_crc32, the CRC-32 of the 8 length bytes and the header with its own
    8 digits read as "00000000" (src/checkpoint.c, ckpt_header_crc)."""
    import struct
    import numpy as np
    header, blobs, offset = {}, [], 0
    meta = dict(meta, format="gputrain-2")
    for name in sorted(tensors):
        v = np.ascontiguousarray(tensors[name], dtype="<f4")
        blob = v.tobytes()
        meta["crc32." + name] = f"{zlib.crc32(blob) & 0xFFFFFFFF:08x}"
        header[name] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    meta["header_crc32"] = "00000000"
    text = json.dumps({"__metadata__": meta, **header}, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data 8-byte aligned, as safetensors writes it
    length = struct.pack("<Q", len(text))
    hole = text.index(b'"header_crc32":"00000000"') + len(b'"header_crc32":"')
    crc = zlib.crc32(length + text) & 0xFFFFFFFF  # the hole still reads 00000000
    text = text[:hole] + f"{crc:08x}".encode() + text[hole + 8:]
    with open(path, "wb") as f:
        f.write(length + text + b"".join(blobs))


def count_correct(model, x, y):
    import torch
    model.eval()
    with torch.no_grad():
        return int((model(x).argmax(1) == y).sum().item())


def to_torch(args):
    """The checkpoint as gputrain eval takes it (gputrain_torch: CRC-checked tensors, the ema.*
    parameters where present, the input step of its metadata "input_norm")."""
    import torch
    g = gputrain_torch
    ref = load_reference(args.ref)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    meta, tensors = g.read_safetensors(args.checkpoint)
    layers, _ = g.model_of(meta, args.checkpoint)
    state, _ = g.split_state(tensors, layers, args.checkpoint, ema=True)
    model = ref.LeNet5().to(dev)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
    _, _, xte, yte = ref.load_fmnist(args.data)
    x = torch.from_numpy(g.input_step(xte[:, None], meta, args.checkpoint)).to(dev)
    y = torch.tensor(yte.astype("int64"), device=dev)
    n = count_correct(model, x, y)
    print(f"interop: input x/255{', normalised by ' + meta['input_norm'] if 'input_norm' in meta else ''}",
          file=sys.stderr)
    print(f"correct {n} of {len(y)} (acc {n / len(y):.4f})")


def from_torch(args):
    import numpy as np
    import torch
    import torch.nn.functional as F
    ref = load_reference(args.ref)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    xtr, ytr, xte, yte = ref.load_fmnist(args.data)
    if args.normalize == "auto" and not hasattr(ref, "channel_stats"):
        sys.exit(f"interop: --ref {args.ref} has no --normalize auto (no channel_stats): use the reference "
                 "of this tree, or --normalize none")
    norm = ref.channel_stats(xtr) if args.normalize == "auto" else None  # gputrain's --normalize auto
    if norm is None:  # x/255 on the device, as this tool always did
        X = torch.tensor(xtr, dtype=torch.float32, device=dev).div_(255.0).unsqueeze(1)
        x = torch.tensor(xte, dtype=torch.float32, device=dev).div_(255.0).unsqueeze(1)
    else:  # gputrain's input step (float32, as gputrain eval computes it)
        X = torch.from_numpy(gputrain_torch.input_step(xtr[:, None], {"input_norm": norm}, args.out)).to(dev)
        x = torch.from_numpy(gputrain_torch.input_step(xte[:, None], {"input_norm": norm}, args.out)).to(dev)
    Y = torch.tensor(ytr.astype(np.int64), device=dev)
    y = torch.tensor(yte.astype(np.int64), device=dev)
    model = ref.LeNet5().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(args.epochs):
        perm = torch.randperm(X.shape[0], device=dev)
        for s in range(X.shape[0] // 64):
            idx = perm[s * 64:(s + 1) * 64]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(X[idx]), Y[idx]).backward()
            opt.step()
    n = count_correct(model, x, y)
    tensors = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    meta = {"model": "lenet5", "model_spec": LENET5_SPEC, "in_shape": "1x28x28", "nclasses": "10",
            "mode": "sync", "optimizer": "sgd", "epoch": str(args.epochs), "step": "0",
            "samples": str(args.epochs * (X.shape[0] // 64) * 64), "updates": "0", "seed": str(args.seed),
            "data_fingerprint": "00000000"}
    if norm is not None:
        meta["input_norm"] = norm  # "M/S" as gputrain writes it: gputrain eval normalises alike
    names = gputrain_torch.idx_test_set(args.data)[2]  # the class names gputrain gives this data
    meta["classes"] = json.dumps(names, separators=(",", ":"))
    write_checkpoint(args.out, tensors, meta)
    print(f"interop: input x/255{', normalised by ' + norm if norm else ''}", file=sys.stderr)
    print(f"correct {n} of {len(y)} (acc {n / len(y):.4f})")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("to-torch")
    a.add_argument("checkpoint")
    b = sub.add_parser("from-torch")
    b.add_argument("out")
    b.add_argument("--epochs", type=int, default=1)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--normalize", default="auto", choices=["auto", "none"],
                   help="input step, as gputrain's --normalize: auto, (x/255 - mean) / std per channel with the "
                   "training split's statistics, kept in the checkpoint's metadata input_norm (default); none, x/255")
    for s in (a, b):
        s.add_argument("--data", required=True)
        s.add_argument("--ref", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_lenet.py"),
                       help="the PyTorch reference (default tools/torch_lenet.py)")
    args = p.parse_args()
    try:
        (to_torch if args.cmd == "to-torch" else from_torch)(args)
    except gputrain_torch.CheckpointError as err:
        print(f"interop: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
