#!/usr/bin/env python3
"""interop.py - checkpoints interchange with PyTorch, checked to the last test sample.

    python3 tools/interop.py to-torch CHECKPOINT --data DIR [--ref tools/torch_lenet.py]
        Loads a gputrain lenet5 checkpoint with safetensors into the reference PyTorch LeNet5
        (load_state_dict, strict) and evaluates it on the test set; prints the number of correct
        samples. Compare with `gputrain eval --checkpoint CHECKPOINT`.

    python3 tools/interop.py from-torch OUT.safetensors --data DIR [--ref tools/torch_lenet.py] [--epochs N]
        Trains the reference PyTorch LeNet5 (SGD lr 0.05 momentum 0.9, batch 64) for N epochs,
        evaluates it, and saves its state_dict as a gputrain checkpoint (PyTorch names and layouts,
        gputrain metadata with a CRC-32 per tensor) that `gputrain eval` reads; prints the number
        of correct samples PyTorch counted.

Both print one line "correct N of M (acc A)". Needs torch, numpy and safetensors (the GPU host has
them); runs on the GPU when there is one.
"""
import argparse
import importlib.util
import os
import sys
import zlib

LENET5_SPEC = ("init:torch conv:6:5:0 relu avgpool:2 conv:16:5:0 relu avgpool:2 "
               "fc:120 relu fc:84 relu fc:10")


def load_reference(path):
    spec = importlib.util.spec_from_file_location("torch_lenet", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_set(ref, data, dev):
    import torch
    _, _, xte, yte = ref.load_fmnist(data)
    x = torch.tensor(xte, dtype=torch.float32, device=dev).div_(255.0).unsqueeze(1)
    y = torch.tensor(yte.astype("int64"), device=dev)
    return x, y


def count_correct(model, x, y):
    import torch
    model.eval()
    with torch.no_grad():
        return int((model(x).argmax(1) == y).sum().item())


def to_torch(args):
    import torch
    from safetensors.torch import load_file
    ref = load_reference(args.ref)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    state = {k: v for k, v in load_file(args.checkpoint).items() if not k.startswith("optim.")}
    model = ref.LeNet5().to(dev)
    model.load_state_dict(state, strict=True)
    x, y = test_set(ref, args.data, dev)
    n = count_correct(model, x, y)
    print(f"correct {n} of {len(y)} (acc {n / len(y):.4f})")


def from_torch(args):
    import numpy as np
    import torch
    import torch.nn.functional as F
    from safetensors.torch import save_file
    ref = load_reference(args.ref)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    xtr, ytr, _, _ = ref.load_fmnist(args.data)
    X = torch.tensor(xtr, dtype=torch.float32, device=dev).div_(255.0).unsqueeze(1)
    Y = torch.tensor(ytr.astype(np.int64), device=dev)
    model = ref.LeNet5().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(args.epochs):
        perm = torch.randperm(X.shape[0], device=dev)
        for s in range(X.shape[0] // 64):
            idx = perm[s * 64:(s + 1) * 64]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(X[idx]), Y[idx]).backward()
            opt.step()
    x, y = test_set(ref, args.data, dev)
    n = count_correct(model, x, y)
    tensors = {k: v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()}
    meta = {"format": "gputrain-1", "model": "lenet5", "model_spec": LENET5_SPEC, "in_shape": "1x28x28",
            "nclasses": "10", "mode": "pytorch", "optimizer": "sgd", "epoch": str(args.epochs), "step": "0",
            "samples": str(args.epochs * (X.shape[0] // 64) * 64), "updates": "0", "seed": str(args.seed),
            "data_fingerprint": "00000000"}
    for k, v in tensors.items():
        meta["crc32." + k] = f"{zlib.crc32(v.numpy().astype('<f4').tobytes()) & 0xFFFFFFFF:08x}"
    save_file(tensors, args.out, metadata=meta)
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
    for s in (a, b):
        s.add_argument("--data", required=True)
        s.add_argument("--ref", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_lenet.py"),
                       help="the PyTorch reference (default tools/torch_lenet.py)")
    args = p.parse_args()
    (to_torch if args.cmd == "to-torch" else from_torch)(args)


if __name__ == "__main__":
    sys.exit(main())
