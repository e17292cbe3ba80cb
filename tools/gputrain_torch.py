#!/usr/bin/env python3
"""gputrain_torch.py - a gputrain checkpoint in Python: the model rebuilt from the checkpoint's own
model spec, as a PyTorch module with its parameters loaded strictly, or as a numpy forward pass.

    import gputrain_torch                                   # tools/ on sys.path
    model, optim_state, meta = gputrain_torch.load_torch("run.safetensors")
    pred = model(x).argmax(1)                               # x: N x C x H x W floats in [0, 1]

load_torch returns a torch.nn.Module whose state_dict names are the checkpoint's (c1.weight, ...,
f3.bias: convolutions c1, c2, ... and fully connected layers f1, f2, ... in spec order), loaded with
load_state_dict(strict=True); the optimizer state ("optim.<state>.<param>" tensors) comes back
separately as {param name: {state name: tensor}} (torch.optim's names: momentum_buffer, exp_avg,
exp_avg_sq), and meta is the checkpoint's metadata. Any spec gputrain accepts works: conv:C:K[:P],
fc:N, relu, sigmoid, tanh, avgpool:K, maxpool:K, dropout:P and init:torch|xavier, separated by
spaces or commas. load_numpy gives the same model as a numpy forward pass (no torch needed).

Command line: the test split of --data as gputrain reads it (IDX files, .gz or plain, or an image
folder DIR/test/<class>/*.png|jpg, which needs Pillow), pixels / 255 (then normalised per channel
where the checkpoint says so: metadata input_norm, --normalize; input_step does it):
    python3 tools/gputrain_torch.py eval CHECKPOINT [--data DIR] [--backend numpy|torch] [--ignore-classes]
prints "test acc A (CORRECT/N)". A checkpoint whose input shape or class count differs from the
data's is refused, and so is one whose class names differ (--ignore-classes goes on), as
`gputrain eval` does. Exit status 0, 1 on a bad file or a mismatch, 2 on a command-line error.
"""
import argparse
import json
import os
import re
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_lenet import find_data, load_idx  # noqa: E402 (the tools' one IDX reader and data search)

MAX_HEADER = 100 << 20
# Fashion-MNIST is told by the CRC-32 of its 10000 test labels and named as gputrain names it
# (src/data.c, data_idx_class_names); other IDX data's classes are "0".."9".
FASHION_TEST_LABELS_CRC = 0x242BC73F
FASHION_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                 "Ankle boot"]


class CheckpointError(Exception):
    """A checkpoint or spec that cannot be read; the message names the file and the problem."""


def read_safetensors(path):
    """(metadata dict, {name: numpy float32 array}) of a safetensors file, every offset and CRC
    checked (CRC-32 of the little-endian bytes, metadata "crc32.<name>", as gputrain writes)."""
    import numpy as np
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise CheckpointError(f"{path}: {e.strerror}") from None
    if len(raw) < 8:
        raise CheckpointError(f"{path}: too short for a safetensors file")
    n = struct.unpack("<Q", raw[:8])[0]
    if n > MAX_HEADER or 8 + n > len(raw):
        raise CheckpointError(f"{path}: header length {n} does not fit the file")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: header is not JSON ({e})") from None
    meta = header.pop("__metadata__", {}) or {}
    data = memoryview(raw)[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        count = 1
        for d in info["shape"]:
            count *= d
        if info.get("dtype") != "F32" or not 0 <= begin <= end <= len(data) or end - begin != 4 * count:
            raise CheckpointError(f"{path}: tensor {name}: not F32 {info['shape']} at {begin}..{end}")
        blob = bytes(data[begin:end])
        want = meta.get("crc32." + name)
        if want is not None and f"{zlib.crc32(blob) & 0xFFFFFFFF:08x}" != want:
            raise CheckpointError(f"{path}: tensor {name}: CRC-32 mismatch (damaged file)")
        tensors[name] = np.frombuffer(blob, dtype="<f4").reshape(info["shape"]).astype(np.float32)
    return meta, tensors


def parse_spec(spec, in_shape):
    """The layers of a model spec, each a dict with kind, shapes and (conv/fc) its parameter name,
    checked as gputrain's parser checks them."""
    c, h, w = in_shape
    layers, nconv, nfc = [], 0, 0
    for tok in (t for t in re.split(r"[\s,]+", spec.strip()) if t):
        f = tok.split(":")
        L = {"kind": f[0], "token": tok}
        if f[0] == "init" and len(f) == 2 and f[1] in ("torch", "xavier"):
            continue
        if f[0] == "conv" and len(f) in (3, 4) and all(x.isdigit() for x in f[1:]):
            nconv += 1
            out, k, pad = int(f[1]), int(f[2]), int(f[3]) if len(f) == 4 else 0
            if out < 1 or k < 1 or pad >= k:
                raise CheckpointError(f"model spec: '{tok}': bad conv")
            L.update(name=f"c{nconv}", in_c=c, out_c=out, k=k, pad=pad)
            c, h, w = out, h + 2 * pad - k + 1, w + 2 * pad - k + 1
        elif f[0] == "fc" and len(f) == 2 and f[1].isdigit() and int(f[1]) >= 1:
            nfc += 1
            L.update(name=f"f{nfc}", in_len=c * h * w, out_c=int(f[1]))
            c, h, w = int(f[1]), 1, 1
        elif f[0] in ("avgpool", "maxpool") and len(f) == 2 and f[1].isdigit() and int(f[1]) >= 1:
            L["k"] = int(f[1])
            h, w = h // L["k"], w // L["k"]
        elif f[0] in ("relu", "sigmoid", "tanh") and len(f) == 1:
            pass
        elif f[0] == "dropout" and len(f) == 2 and re.fullmatch(r"\d*\.?\d+", f[1]) and float(f[1]) < 1:
            L["p"] = float(f[1])
        else:
            raise CheckpointError(f"model spec: '{tok}': not a layer gputrain knows")
        if h < 1 or w < 1:
            raise CheckpointError(f"model spec: '{tok}': output smaller than 1x1")
        layers.append(L)
    if not layers or layers[-1]["kind"] != "fc":
        raise CheckpointError("model spec: the last layer must be fc:N")
    return layers


def model_of(meta, path):
    try:
        in_shape = tuple(int(v) for v in meta["in_shape"].split("x"))
        return parse_spec(meta["model_spec"], in_shape), in_shape
    except (KeyError, ValueError):
        raise CheckpointError(f"{path}: metadata lacks a model_spec or a CxHxW in_shape") from None


def split_state(tensors, layers, path):
    """Parameters (checked against the spec's names and shapes) and optimizer state by parameter."""
    params = {k: v for k, v in tensors.items() if not k.startswith("optim.")}
    want = {}
    for L in layers:
        if L["kind"] == "conv":
            want[L["name"] + ".weight"] = (L["out_c"], L["in_c"], L["k"], L["k"])
        elif L["kind"] == "fc":
            want[L["name"] + ".weight"] = (L["out_c"], L["in_len"])
        if "name" in L:
            want[L["name"] + ".bias"] = (L["out_c"],)
    if set(params) != set(want) or any(params[k].shape != s for k, s in want.items()):
        raise CheckpointError(f"{path}: tensors {sorted(params)} do not match the model spec's {sorted(want)}")
    optim = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            state, _, pname = k[len("optim."):].partition(".")
            optim.setdefault(pname, {})[state] = v
    return params, optim


def load_numpy(path):
    """(forward(x) -> logits as numpy, optimizer state, metadata) for a checkpoint."""
    meta, tensors = read_safetensors(path)
    layers, _ = model_of(meta, path)
    params, optim = split_state(tensors, layers, path)
    return (lambda x: numpy_forward(layers, params, x)), optim, meta


def numpy_forward(layers, params, x):
    """Logits of x (N x C x H x W float32) in eval mode (dropout is the identity)."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view
    x = np.asarray(x, dtype=np.float32)
    for L in layers:
        kind = L["kind"]
        if kind == "conv":
            p = L["pad"]
            xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))) if p else x
            win = sliding_window_view(xp, (L["k"], L["k"]), axis=(2, 3))  # N C Ho Wo k k
            y = np.tensordot(win, params[L["name"] + ".weight"], axes=([1, 4, 5], [1, 2, 3]))  # N Ho Wo O
            x = y.transpose(0, 3, 1, 2) + params[L["name"] + ".bias"][None, :, None, None]
        elif kind == "fc":
            x = x.reshape(x.shape[0], -1) @ params[L["name"] + ".weight"].T + params[L["name"] + ".bias"]
        elif kind in ("avgpool", "maxpool"):
            k = L["k"]
            n, c, h, w = x.shape
            blocks = x[:, :, :h // k * k, :w // k * k].reshape(n, c, h // k, k, w // k, k)
            x = blocks.mean(axis=(3, 5)) if kind == "avgpool" else blocks.max(axis=(3, 5))
        elif kind == "relu":
            x = np.maximum(x, 0)
        elif kind == "sigmoid":
            x = 1 / (1 + np.exp(-x))
        elif kind == "tanh":
            x = np.tanh(x)
        x = x.astype(np.float32, copy=False)
    return x


def torch_module(layers, in_shape):
    """A torch.nn.Module for the spec, with PyTorch's layouts and the checkpoint's names."""
    import torch.nn as nn
    import torch.nn.functional as F

    class GputrainNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers
            self.in_shape = in_shape
            for L in layers:
                if L["kind"] == "conv":
                    setattr(self, L["name"], nn.Conv2d(L["in_c"], L["out_c"], L["k"], padding=L["pad"]))
                elif L["kind"] == "fc":
                    setattr(self, L["name"], nn.Linear(L["in_len"], L["out_c"]))

        def forward(self, x):
            acts = {"relu": F.relu, "sigmoid": F.sigmoid, "tanh": F.tanh}
            for L in self.layers:
                kind = L["kind"]
                if kind == "conv":
                    x = getattr(self, L["name"])(x)
                elif kind == "fc":
                    x = getattr(self, L["name"])(x.flatten(1))
                elif kind == "avgpool":
                    x = F.avg_pool2d(x, L["k"])
                elif kind == "maxpool":
                    x = F.max_pool2d(x, L["k"])
                elif kind == "dropout":
                    x = F.dropout(x, L["p"], self.training)
                else:
                    x = acts[kind](x)
            return x

    return GputrainNet()


def load_torch(path, device="cpu"):
    """(torch module in eval mode, optimizer state {param: {state: tensor}}, metadata)."""
    import torch
    meta, tensors = read_safetensors(path)
    layers, in_shape = model_of(meta, path)
    params, optim = split_state(tensors, layers, path)
    model = torch_module(layers, in_shape)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()}, strict=True)
    state = {p: {s: torch.from_numpy(v).to(device) for s, v in st.items()} for p, st in optim.items()}
    return model.to(device).eval(), state, meta


class DataError(Exception):
    """A --data folder that cannot be read; the message names the file and the problem."""


def read_idx(path):
    """load_idx, its failures as DataError."""
    try:
        return load_idx(path)
    except (OSError, EOFError, ValueError, IndexError, struct.error) as e:
        raise DataError(f"{path}: not a readable IDX file ({e})") from None


def idx_test_set(data):
    """(images N x C x H x W uint8, labels, class names) of an IDX folder's test split."""
    def find(name):
        for p in (os.path.join(data, name + ".gz"), os.path.join(data, name)):
            if os.path.isfile(p):
                return p
        raise DataError(f"{data}: no {name}(.gz)")
    images = read_idx(find("t10k-images-idx3-ubyte"))
    labels = read_idx(find("t10k-labels-idx1-ubyte"))
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataError(f"{data}: test images {images.shape} and labels {labels.shape} do not match")
    fashion = len(labels) == 10000 and zlib.crc32(labels.tobytes()) == FASHION_TEST_LABELS_CRC
    return images[:, None], labels, FASHION_NAMES if fashion else [str(k) for k in range(10)]


def image_pixels(path):
    """One image as C x H x W uint8, alpha dropped and 16-bit samples cut to 8, as gputrain's
    stb_image reading keeps them."""
    import numpy as np
    try:
        from PIL import Image
    except ImportError:
        raise DataError(f"{path}: reading an image folder needs Pillow (python3 -m pip install pillow)") from None
    try:
        with Image.open(path) as img:
            grey = img.mode in ("1", "L", "LA", "I", "F") or img.mode.startswith("I;16")
            if img.mode == "I" or img.mode.startswith("I;16"):
                px = (np.asarray(img).astype(np.uint32) >> 8).astype(np.uint8)
            else:
                px = np.asarray(img.convert("L" if grey else "RGB"))
    except OSError as e:
        raise DataError(f"{path}: not an image ({e})") from None
    return px[None] if px.ndim == 2 else px.transpose(2, 0, 1)


def listing(folder):
    """A folder's entries in bytewise order, hidden ones skipped (as gputrain lists them)."""
    return sorted((n for n in os.listdir(folder) if not n.startswith(".")), key=os.fsencode)


def folder_test_set(data):
    """(images, labels, class names) of DIR/test/<class>/*: classes and files in bytewise order,
    hidden entries skipped, every image of the first one's size and channels."""
    import numpy as np
    root = os.path.join(data, "test")
    names = listing(root)
    if not names:
        raise DataError(f"{root}: no class folders")
    images, labels = [], []
    for k, name in enumerate(names):
        files = listing(os.path.join(root, name))
        if not files:
            raise DataError(f"{os.path.join(root, name)}: empty class folder")
        for f in files:
            path = os.path.join(root, name, f)
            px = image_pixels(path)
            if images and px.shape != images[0].shape:
                raise DataError(f"{path}: {'x'.join(map(str, px.shape))} (CxHxW), but the first image is "
                                f"{'x'.join(map(str, images[0].shape))}")
            images.append(px)
            labels.append(k)
    return np.stack(images), np.array(labels), names


def test_set(data):
    """The test split of --data, as gputrain reads it: an image folder when DIR/test is one."""
    try:
        if os.path.isdir(os.path.join(data, "test")):
            return folder_test_set(data)
        return idx_test_set(data)
    except OSError as e:
        raise DataError(f"{e.filename}: {e.strerror}") from None


def check_match(path, meta, images, names, data, ignore_classes):
    """The checkpoint fits the data: its input shape and class count always, its class names
    unless ignore_classes (gputrain eval's rules)."""
    shape = "x".join(str(d) for d in images.shape[1:])
    if meta.get("in_shape") != shape:
        raise CheckpointError(f"{path}: the model takes {meta.get('in_shape')} inputs, the data {data} has {shape}")
    try:
        nclasses = int(meta.get("nclasses", ""))
    except ValueError:
        raise CheckpointError(f"{path}: metadata \"nclasses\" is missing or not a number") from None
    if nclasses != len(names):
        raise CheckpointError(f"{path}: the checkpoint has {nclasses} classes, the data {data} has {len(names)}")
    if ignore_classes or "classes" not in meta:
        return
    try:
        mine = json.loads(meta["classes"])
    except json.JSONDecodeError:
        raise CheckpointError(f"{path}: metadata \"classes\" is not a JSON list") from None
    for k, (a, b) in enumerate(zip(mine, names)):
        if a != b:
            raise CheckpointError(f"{path}: class {k} is '{a}' in the checkpoint but '{b}' in the data {data}: "
                                  "the class names differ (--ignore-classes to go on)")


def input_step(images, meta, path):
    """gputrain's input step on N x C x H x W uint8 images: x / 255, then (x / 255 - mean) / std per
    channel where the checkpoint's metadata "input_norm" ("M1,.../S1,...", --normalize) says so."""
    import numpy as np
    x = images.astype(np.float32) / np.float32(255.0)
    norm = meta.get("input_norm")
    if norm is None:
        return x
    try:
        mean, std = ([np.float32(v) for v in part.split(",")] for part in norm.split("/"))
    except ValueError:
        raise CheckpointError(f"{path}: metadata \"input_norm\" is not M1,.../S1,...") from None
    if len(mean) != x.shape[1] or len(std) != x.shape[1]:
        raise CheckpointError(f"{path}: metadata \"input_norm\" is not one mean and std per channel")
    mean = np.array(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    std = np.array(std, dtype=np.float32).reshape(1, -1, 1, 1)
    return (x - mean) / std


def evaluate(args):
    """Correct test predictions, in batches of 1000."""
    import numpy as np
    images, labels, names = test_set(args.data)
    if args.backend == "torch":
        import torch
        model, _, meta = load_torch(args.checkpoint)

        def forward(x):
            with torch.no_grad():
                return model(torch.from_numpy(x)).numpy()
    else:
        forward, _, meta = load_numpy(args.checkpoint)
    check_match(args.checkpoint, meta, images, names, args.data, args.ignore_classes)
    x = input_step(images, meta, args.checkpoint)
    pred = np.concatenate([forward(x[i:i + 1000]).argmax(1) for i in range(0, len(x), 1000)])
    return int((pred == labels).sum()), len(labels)


def main(argv=None):
    p = argparse.ArgumentParser(prog="gputrain_torch.py", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval", help="test accuracy of a checkpoint on Fashion-MNIST")
    e.add_argument("checkpoint")
    e.add_argument("--data", default="", help="Fashion-MNIST folder (default: datasets/fashion-mnist, then "
                   "/usr/share/datasets/fashion-mnist)")
    e.add_argument("--backend", default="numpy", choices=["numpy", "torch"])
    e.add_argument("--ignore-classes", action="store_true", help="use a checkpoint whose class names differ")
    args = p.parse_args(argv)
    given = args.data
    args.data = find_data(args.data)
    if not args.data:
        print("gputrain_torch: --data: no Fashion-MNIST test set (t10k-labels-idx1-ubyte.gz) found", file=sys.stderr)
        return 2
    if given and not os.path.isdir(given):
        print(f"gputrain_torch: --data: '{given}' is not a folder", file=sys.stderr)
        return 2
    try:
        correct, n = evaluate(args)
    except (CheckpointError, DataError) as err:
        print(f"gputrain_torch: {err}", file=sys.stderr)
        return 1
    except ImportError as err:
        print(f"gputrain_torch: {err.name} is not installed (python3 -m pip install {err.name})", file=sys.stderr)
        return 1
    print(f"test acc {correct / n:.4f} ({correct}/{n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
