#!/usr/bin/env python3
"""gputrain_torch.py - a gputrain checkpoint in Python: the model rebuilt from the checkpoint's own
model spec, as a PyTorch module with its parameters loaded strictly, or as a numpy forward pass.

    import gputrain_torch                                   # tools/ on sys.path
    model, optim_state, meta = gputrain_torch.load_torch("run.safetensors")
    pred = model(x).argmax(1)                               # x: N x C x H x W floats in [0, 1]

load_torch returns a torch.nn.Module whose state_dict names are the checkpoint's (c1.weight, ...,
f3.bias: convolutions c1, c2, ..., batch norms b1, ... and fully connected layers f1, ... in spec
order; with names:resnet, as the residual built-ins have them: stem.0.weight, layers.N.c1.weight,
layers.N.b1.running_mean, layers.N.short.0.weight, fc.bias, ...), loaded with
load_state_dict(strict=True): parameters and, for batch norm, the buffers running_mean, running_var
and num_batches_tracked (an int64 scalar, whether the file holds it as an F32 or an integer tensor,
as a scalar or one element). A resnet20 or resnet18 checkpoint becomes tools/torch_resnet.py's
ResNet, the project's PyTorch reference; any other spec a module that runs its layers in order.
Where the checkpoint holds a moving average of the parameters ("ema.<param>" tensors, gputrain
train --ema, the default with a constant learning rate and for resnet20 and resnet18 under
allreduce) the module gets those parameters, as
gputrain eval does (ema=False: the training parameters). The optimizer state ("optim.<state>.<param>" tensors) comes back separately as {param name:
{state name: tensor}} (torch.optim's names: momentum_buffer, exp_avg, exp_avg_sq), and meta is
the checkpoint's metadata. Any spec gputrain accepts works: conv:OUT:K[:PAD[:STRIDE]][:nobias],
fc:N, bn, gap, relu, sigmoid, tanh, avgpool:K, maxpool:K, dropout:P, residual blocks
res[ BODY | SHORTCUT ] and res[ BODY ] (identity shortcut), init:torch|xavier|kaiming and
names:plain|resnet, separated by spaces or commas. load_numpy gives the same model as a numpy
forward pass (no torch needed; evaluation mode: batch norm with the running statistics).

Command line: the test split of --data as gputrain reads it (IDX files, .gz or plain, or an image
folder DIR/test/<class>/*.png|jpg, which needs Pillow), pixels / 255 (then normalised per channel
where the checkpoint says so: metadata input_norm, --normalize; input_step does it):
    python3 tools/gputrain_torch.py eval CHECKPOINT [--data DIR] [--backend numpy|torch] [--ignore-classes] [--no-ema]
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
from torch_lenet import find_data, load_idx, normalise  # noqa: E402 (the tools' one IDX reader, data search and input step)

MAX_HEADER = 100 << 20
# Fashion-MNIST is told by the CRC-32 of its 10000 test labels and named as gputrain names it
# (src/data.c, data_idx_class_names); other IDX data's classes are "0".."9".
FASHION_TEST_LABELS_CRC = 0x242BC73F
FASHION_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                 "Ankle boot"]


class CheckpointError(Exception):
    """A checkpoint or spec that cannot be read; the message names the file and the problem."""


# safetensors dtypes a checkpoint may hold: parameters and running statistics are F32; a buffer
# such as num_batches_tracked may be stored as an integer (PyTorch keeps it as int64).
DTYPES = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


def read_safetensors(path):
    """(metadata dict, {name: numpy array}) of a safetensors file, every offset and CRC checked
    (CRC-32 of the little-endian bytes, metadata "crc32.<name>", as gputrain writes). F32 tensors
    come back as float32, integer ones (I64, I32) as int64, F64 as float64."""
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
        dt = DTYPES.get(info.get("dtype"))
        if dt is None or not 0 <= begin <= end <= len(data) or end - begin != int(dt[2]) * count:
            raise CheckpointError(f"{path}: tensor {name}: not F32, F64, I64 or I32 {info['shape']} "
                                  f"at {begin}..{end}")
        blob = bytes(data[begin:end])
        want = meta.get("crc32." + name)
        if want is not None and f"{zlib.crc32(blob) & 0xFFFFFFFF:08x}" != want:
            raise CheckpointError(f"{path}: tensor {name}: CRC-32 mismatch (damaged file)")
        arr = np.frombuffer(blob, dtype=dt).reshape(info["shape"])
        tensors[name] = arr.astype(np.float32 if dt == "<f4" else np.float64 if dt == "<f8" else np.int64)
    return meta, tensors


def conv_token(f, tok):
    """conv:OUT:K[:PAD[:STRIDE]][:nobias] as (out, k, pad, stride, bias)."""
    bias = f[-1] != "nobias"
    nums = f[1:] if bias else f[1:-1]
    if not 2 <= len(nums) <= 4 or not all(x.isdigit() for x in nums):
        raise CheckpointError(f"model spec: '{tok}': expected conv:OUT:K[:PAD[:STRIDE]][:nobias]")
    out, k = int(nums[0]), int(nums[1])
    pad = int(nums[2]) if len(nums) >= 3 else 0
    stride = int(nums[3]) if len(nums) == 4 else 1
    if out < 1 or k < 1 or pad >= k or stride < 1:
        raise CheckpointError(f"model spec: '{tok}': bad conv")
    return out, k, pad, stride, bias


def parse_layer(tok, shape):
    """One layer token as a dict (kind, token and its numbers) and the output shape it gives."""
    c, h, w = shape
    f = tok.split(":")
    L = {"kind": f[0], "token": tok}
    if f[0] == "conv":
        out, k, pad, stride, bias = conv_token(f, tok)
        L.update(in_c=c, out_c=out, k=k, pad=pad, stride=stride, bias=bias)
        side = lambda n: (n + 2 * pad - k) // stride + 1 if n + 2 * pad >= k else 0  # noqa: E731
        return L, (out, side(h), side(w))
    if f[0] == "fc" and len(f) == 2 and f[1].isdigit() and int(f[1]) >= 1:
        L.update(in_len=c * h * w, out_c=int(f[1]), bias=True)
        return L, (int(f[1]), 1, 1)
    if f[0] in ("avgpool", "maxpool") and len(f) == 2 and f[1].isdigit() and int(f[1]) >= 1:
        L["k"] = int(f[1])
        return L, (c, h // L["k"], w // L["k"])
    if f[0] == "dropout" and len(f) == 2 and re.fullmatch(r"\d*\.?\d+", f[1]) and float(f[1]) < 1:
        L["p"] = float(f[1])
        return L, shape
    if f[0] == "bn" and len(f) == 1:
        L.update(c=c, out_c=c)
        return L, shape
    if f[0] == "gap" and len(f) == 1:
        return L, (c, 1, 1)
    if f[0] in ("relu", "sigmoid", "tanh", "res[", "|", "]") and len(f) == 1:
        return L, shape
    raise CheckpointError(f"model spec: '{tok}': not a layer gputrain knows")


def parse_spec(spec, in_shape):
    """The layers of a model spec, each a dict with kind, shapes and (conv, bn, fc) its parameter
    name, checked as gputrain's parser checks them. Residual blocks res[ BODY | SHORTCUT ] (or
    res[ BODY ], the identity shortcut) add the body's output to the shortcut's; names:resnet
    names the parameters as src/model.c does (see name_resnet)."""
    shape, layers, names, blocks = tuple(in_shape), [], "plain", []
    for tok in (t for t in re.split(r"[\s,]+", spec.strip()) if t):
        if re.fullmatch(r"init:(torch|xavier|kaiming)", tok):
            continue
        if tok.startswith("names:"):
            if tok not in ("names:plain", "names:resnet"):
                raise CheckpointError(f"model spec: '{tok}': unknown names (names:plain or names:resnet)")
            names = tok[6:]
            continue
        L, out = parse_layer(tok, shape)
        if L["kind"] == "res[":
            blocks.append({"in": shape, "body": None})
        elif L["kind"] == "|":
            if not blocks or blocks[-1]["body"] is not None:
                raise CheckpointError(f"model spec: '{tok}' outside a residual block")
            blocks[-1]["body"], out = shape, blocks[-1]["in"]
        elif L["kind"] == "]":
            if not blocks:
                raise CheckpointError("model spec: ']' closes no residual block")
            b = blocks.pop()
            other = b["body"] if b["body"] is not None else b["in"]
            if other != shape:
                raise CheckpointError(f"model spec: a residual block adds {'x'.join(map(str, other))} to "
                                      f"{'x'.join(map(str, shape))}: they must match")
        shape = out
        if shape[1] < 1 or shape[2] < 1:
            raise CheckpointError(f"model spec: '{tok}': output smaller than 1x1")
        layers.append(L)
    if blocks:
        raise CheckpointError("model spec: a residual block is not closed with ']'")
    if not layers or layers[-1]["kind"] != "fc":
        raise CheckpointError("model spec: the last layer must be fc:N")
    (name_resnet if names == "resnet" else name_plain)(layers)
    seen = set()
    for L in (L for L in layers if "name" in L):
        if L["name"] in seen:
            raise CheckpointError(f"model spec: names:resnet names two layers {L['name']} (it takes a stem, "
                                  "blocks not nested, then one fc)")
        seen.add(L["name"])
    return layers


PREFIX = {"conv": "c", "bn": "b", "fc": "f"}


def name_plain(layers):
    """c1, c2, ... b1, ... f1, ... in spec order."""
    count = {}
    for L in layers:
        p = PREFIX.get(L["kind"])
        if p:
            count[p] = count.get(p, 0) + 1
            L["name"] = f"{p}{count[p]}"


def name_resnet(layers):
    """The names of PyTorch's residual networks: stem.N before the first block (N counting layers
    with parameters, as in Sequential(conv, bn, relu)), layers.B.c1/b1/c2/b2 in block B (numbered
    across stages), layers.B.short.N in its shortcut, fc after the blocks."""
    started = inside = shortcut = False
    block, nth, convs, bns = -1, 0, 0, 0
    for L in layers:
        kind = L["kind"]
        if kind == "res[":
            block += 1
            started, inside, shortcut, nth, convs, bns = True, True, False, 0, 0, 0
        elif kind == "|":
            shortcut = True
        elif kind == "]":
            inside, nth = False, 0
        if kind not in PREFIX:
            continue
        if inside and shortcut:
            L["name"], nth = f"layers.{block}.short.{nth}", nth + 1
        elif inside and kind == "conv":
            convs += 1
            L["name"] = f"layers.{block}.c{convs}"
        elif inside:
            bns += 1
            L["name"] = f"layers.{block}.b{bns}"
        elif not started:
            L["name"], nth = f"stem.{nth}", nth + 1
        else:
            L["name"] = "fc"


def model_of(meta, path):
    try:
        in_shape = tuple(int(v) for v in meta["in_shape"].split("x"))
        return parse_spec(meta["model_spec"], in_shape), in_shape
    except (KeyError, ValueError):
        raise CheckpointError(f"{path}: metadata lacks a model_spec or a CxHxW in_shape") from None


BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def expected_tensors(layers):
    """({parameter name: shape}, {buffer name: shape}) of a parsed spec, PyTorch's layouts."""
    params, buffers = {}, {}
    for L in layers:
        kind = L["kind"]
        if kind == "conv":
            params[L["name"] + ".weight"] = (L["out_c"], L["in_c"], L["k"], L["k"])
        elif kind == "fc":
            params[L["name"] + ".weight"] = (L["out_c"], L["in_len"])
        elif kind == "bn":
            params[L["name"] + ".weight"] = (L["c"],)
            buffers.update({f"{L['name']}.running_mean": (L["c"],), f"{L['name']}.running_var": (L["c"],),
                            f"{L['name']}.num_batches_tracked": ()})
        if kind == "bn" or L.get("bias"):
            params[L["name"] + ".bias"] = (L["out_c"],)
    return params, buffers


def split_state(tensors, layers, path, ema=True):
    """The model's state (parameters and buffers, checked against the spec's names and shapes) and
    the optimizer state by parameter. Batch norm's buffers are running_mean and running_var (float32)
    and num_batches_tracked, which comes back as an int64 scalar whether the file holds it as a
    scalar or one element, as a float or an integer. A model without batch norm has no buffers.
    With ema (the default, as gputrain eval) the parameters are the moving average's ("ema.<name>"
    tensors, written by train --ema) where the file has one; the buffers are the run's."""
    import numpy as np
    state = {k: v for k, v in tensors.items() if not k.startswith(("optim.", "ema."))}
    avg = {k[len("ema."):]: v for k, v in tensors.items() if k.startswith("ema.")}
    want, bufs = expected_tensors(layers)
    if avg:
        if sorted(avg) != sorted(set(want)):
            raise CheckpointError(f"{path}: the ema.* tensors do not match the model's parameters")
        if ema:
            state.update(avg)
    want.update(bufs)
    for k in bufs:
        if k.endswith(".num_batches_tracked") and k in state and state[k].size == 1:
            v = state[k].reshape(())
            if v.dtype.kind == "f" and (not np.isfinite(v) or v < 0 or v != np.floor(v)):
                raise CheckpointError(f"{path}: tensor {k}: {v} is not a count")
            state[k] = v.astype(np.int64)
    missing = sorted(set(want) - set(state))
    extra = sorted(set(state) - set(want))
    if missing or extra:
        raise CheckpointError(f"{path}: the tensors do not match the model spec: missing {missing[:6]}"
                              f"{' ...' if len(missing) > 6 else ''}, unexpected {extra[:6]}"
                              f"{' ...' if len(extra) > 6 else ''}")
    for k, s in want.items():
        if state[k].shape != s:
            raise CheckpointError(f"{path}: tensor {k} is {list(state[k].shape)}, the model spec wants {list(s)}")
        if not k.endswith(".num_batches_tracked") and state[k].dtype != np.float32:
            state[k] = state[k].astype(np.float32)
    optim = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            st, _, pname = k[len("optim."):].partition(".")
            optim.setdefault(pname, {})[st] = v
    return state, optim


def load_numpy(path, ema=True):
    """(forward(x) -> logits as numpy, optimizer state, metadata) for a checkpoint (its moving
    average's parameters where it has one, unless ema=False)."""
    meta, tensors = read_safetensors(path)
    layers, _ = model_of(meta, path)
    params, optim = split_state(tensors, layers, path, ema)
    return (lambda x: numpy_forward(layers, params, x)), optim, meta


BN_EPS = 1e-5  # include/gputrain/layers.h, GT_BN_EPS; PyTorch's default


def numpy_conv(L, params, x):
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view
    p, s = L["pad"], L["stride"]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))) if p else x
    win = sliding_window_view(xp, (L["k"], L["k"]), axis=(2, 3))[:, :, ::s, ::s]  # N C Ho Wo k k
    y = np.tensordot(win, params[L["name"] + ".weight"], axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    return y + params[L["name"] + ".bias"][None, :, None, None] if L["bias"] else y


BLOCK_MARKERS = ("res[", "|", "]")


def block_marker(kind, x, blocks):
    """A residual block marker on x (numpy or torch alike), blocks the stack of open blocks, each
    [its input, its body's output or None]: res[ keeps the input, | keeps the body's output and
    starts the shortcut from the input, ] adds the other branch (the body's, or the input)."""
    if kind == "res[":
        blocks.append([x, None])
    elif kind == "|":
        blocks[-1][1], x = x, blocks[-1][0]
    else:
        start, body = blocks.pop()
        x = x + (body if body is not None else start)
    return x


def numpy_forward(layers, params, x):
    """Logits of x (N x C x H x W float32) in eval mode (dropout is the identity, batch norm uses the
    running statistics)."""
    import numpy as np
    x = np.asarray(x, dtype=np.float32)
    blocks = []  # per open residual block: [its input, the body's output or None]
    for L in layers:
        kind = L["kind"]
        if kind == "conv":
            x = numpy_conv(L, params, x)
        elif kind == "fc":
            x = x.reshape(x.shape[0], -1) @ params[L["name"] + ".weight"].T + params[L["name"] + ".bias"]
        elif kind == "bn":
            n = L["name"]
            inv = 1.0 / np.sqrt(params[n + ".running_var"].astype(np.float64) + BN_EPS)
            scale = (params[n + ".weight"] * inv).astype(np.float32)
            shift = (params[n + ".bias"] - params[n + ".running_mean"] * scale).astype(np.float32)
            x = x * scale[None, :, None, None] + shift[None, :, None, None]
        elif kind == "gap":
            x = x.mean(axis=(2, 3), keepdims=True)
        elif kind in ("avgpool", "maxpool"):
            k = L["k"]
            n, c, h, w = x.shape
            cut = x[:, :, :h // k * k, :w // k * k].reshape(n, c, h // k, k, w // k, k)
            x = cut.mean(axis=(3, 5)) if kind == "avgpool" else cut.max(axis=(3, 5))
        elif kind == "relu":
            x = np.maximum(x, 0)
        elif kind == "sigmoid":
            x = 1 / (1 + np.exp(-x))
        elif kind == "tanh":
            x = np.tanh(x)
        elif kind in BLOCK_MARKERS:
            x = block_marker(kind, x, blocks)
        x = x.astype(np.float32, copy=False)
    return x


def torch_module(layers, in_shape):
    """A torch.nn.Module for any parsed spec, with PyTorch's layouts and the checkpoint's names
    (a dotted name such as layers.3.short.0 is a module inside containers layers, 3 and short)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def make(L):
        if L["kind"] == "conv":
            return nn.Conv2d(L["in_c"], L["out_c"], L["k"], stride=L["stride"], padding=L["pad"], bias=L["bias"])
        if L["kind"] == "bn":
            return nn.BatchNorm2d(L["c"], eps=BN_EPS, momentum=0.1)
        return nn.Linear(L["in_len"], L["out_c"])

    class GputrainNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers_spec = layers
            self.in_shape = in_shape
            self.mods = []  # the module of each layer, or None (a plain list: not registered twice)
            for L in layers:
                if "name" not in L:
                    self.mods.append(None)
                    continue
                parent, *path = [self] + L["name"].split(".")
                for part in path[:-1]:
                    if not hasattr(parent, part):
                        parent.add_module(part, nn.Module())
                    parent = getattr(parent, part)
                parent.add_module(path[-1], make(L))
                self.mods.append(getattr(parent, path[-1]))

        def forward(self, x):
            acts = {"relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}
            blocks = []
            for L, mod in zip(self.layers_spec, self.mods):
                kind = L["kind"]
                if kind == "fc":
                    x = mod(x.flatten(1))
                elif mod is not None:
                    x = mod(x)
                elif kind == "avgpool":
                    x = F.avg_pool2d(x, L["k"])
                elif kind == "maxpool":
                    x = F.max_pool2d(x, L["k"])
                elif kind == "gap":
                    x = x.mean(dim=(2, 3), keepdim=True)
                elif kind == "dropout":
                    x = F.dropout(x, L["p"], self.training)
                elif kind in BLOCK_MARKERS:
                    x = block_marker(kind, x, blocks)
                else:
                    x = acts[kind](x)
            return x

    return GputrainNet()


def reference_model(meta, in_shape):
    """torch_resnet.py's ResNet when the checkpoint's spec is exactly a residual built-in's canonical
    spec (for its class count), else None."""
    from torch_resnet import ARCHS, gputrain_spec
    try:
        nclasses = int(meta.get("nclasses", ""))
    except ValueError:
        return None
    for name in ARCHS:
        if meta.get("model_spec") == gputrain_spec(name, nclasses):
            from torch_resnet import ResNet
            return ResNet(name, in_shape[0], nclasses)
    return None


def load_torch(path, device="cpu", generic=False, ema=True):
    """(torch module in eval mode, optimizer state {param: {state: tensor}}, metadata). A resnet20 or
    resnet18 checkpoint becomes tools/torch_resnet.py's ResNet (the project's reference), any other
    spec (or any spec with generic=True) a module that runs the spec's layers in order; either way
    parameters and buffers are loaded with load_state_dict(strict=True): the moving average's
    parameters where the checkpoint has one (train --ema), unless ema=False."""
    import torch
    meta, tensors = read_safetensors(path)
    layers, in_shape = model_of(meta, path)
    state, optim = split_state(tensors, layers, path, ema)
    model = None if generic else reference_model(meta, in_shape)
    if model is None:
        model = torch_module(layers, in_shape)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
    opt_state = {p: {s: torch.from_numpy(v.copy()).to(device) for s, v in st.items()} for p, st in optim.items()}
    return model.to(device).eval(), opt_state, meta


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
    key = "class_names" if "class_names" in meta else "classes"  # more than 256: "class_names"
    if ignore_classes or key not in meta:
        return
    try:
        mine = json.loads(meta[key])
    except json.JSONDecodeError:
        raise CheckpointError(f"{path}: metadata \"{key}\" is not a JSON list") from None
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
        return normalise(x, norm)
    except ValueError as err:
        raise CheckpointError(f"{path}: metadata \"input_norm\" {err}") from None

def evaluate(args):
    """Correct test predictions, in batches (1000 images with torch, 200 with numpy)."""
    import numpy as np
    images, labels, names = test_set(args.data)
    if args.backend == "torch":
        import torch
        model, _, meta = load_torch(args.checkpoint, ema=not args.no_ema)

        def forward(x):
            with torch.no_grad():
                return model(torch.from_numpy(x)).numpy()
    else:
        forward, _, meta = load_numpy(args.checkpoint, ema=not args.no_ema)
    check_match(args.checkpoint, meta, images, names, args.data, args.ignore_classes)
    x = input_step(images, meta, args.checkpoint)
    n = 1000 if args.backend == "torch" else 200  # numpy's unfolded windows: k*k copies of a layer's input
    pred = np.concatenate([forward(x[i:i + n]).argmax(1) for i in range(0, len(x), n)])
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
    e.add_argument("--no-ema", action="store_true", help="the training parameters, not the checkpoint's moving "
                   "average (ema.* tensors), which is used where it has one")
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
