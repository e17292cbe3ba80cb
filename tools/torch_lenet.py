#!/usr/bin/env python3
"""torch_lenet.py - gputrain's PyTorch reference: LeNet-5 on Fashion-MNIST, trained the fast way
PyTorch allows (whole data set resident on the device, no DataLoader), so that every comparison in
tools/ measures gputrain against PyTorch at its best, not against an input pipeline.

The model is gputrain's lenet5: conv 6@5x5 relu, avgpool 2, conv 16@5x5 relu, avgpool 2, fc 120
relu, fc 84 relu, fc 10, softmax cross-entropy; modules c1, c2, f1, f2, f3, so its state_dict has
the names and layouts of a gputrain lenet5 checkpoint.

Modes: single (one device) and ddp (DistributedDataParallel, one process per GPU started here,
no torchrun; --batch is per GPU and each GPU takes its own slice of every epoch's permutation).
--compile 1 runs the model through torch.compile; --graph 1 captures the whole training step
(forward, backward, optimizer) in one CUDA graph (single mode on a GPU). --tf32 1 lets matmuls and
convolutions use TF32 (default 0: exact fp32, as gputrain computes).

Input step, as gputrain's --normalize: auto (the default, as gputrain's) turns every pixel into
(x/255 - mean[ch]) / std[ch], mean and std the per-channel mean and population standard deviation of
x/255 over the training split (the first --train-samples images where given), computed as gputrain
computes them (channel_stats: exact integer sums, double, rounded to float32) and applied to train
and test images with gputrain's float32 formula (normalise, the tools' one copy of it, which
gputrain_torch.py uses too); none: x/255 alone, computed as it always was here. The values are the
summary's input_norm ("M1,.../S1,...", the form of a gputrain checkpoint's metadata input_norm,
"none" for none).

Prints one line per epoch and writes --out FILE.jsonl: one {"type": "epoch"} record per epoch
(epoch time, samples/s, mean train loss, test accuracy) and a final {"type": "summary"} record
(epoch_times, test_acc, samples_per_s_steady = an epoch's samples over the median epoch time after
the first, normalize, input_norm, ...), which is also the last line on stdout. Exit status 2 on a
command-line error.
"""
import argparse
import gzip
import json
import os
import statistics
import struct
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # --help and the argument checks work without them
    torch = None

DATA_DIRS = ("datasets/fashion-mnist", "/usr/share/datasets/fashion-mnist")


def load_idx(path):
    """An IDX file (gzip or plain): big-endian magic with the dimension count in its last byte, then
    sizes."""
    import numpy as np
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fmnist(folder):
    """(train images, train labels, test images, test labels) as uint8 numpy arrays."""
    names = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
             "t10k-labels-idx1-ubyte.gz")
    return tuple(load_idx(os.path.join(folder, n)) for n in names)


if torch is not None:
    class LeNet5(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(1, 6, 5)
            self.c2 = nn.Conv2d(6, 16, 5)
            self.f1 = nn.Linear(16 * 4 * 4, 120)
            self.f2 = nn.Linear(120, 84)
            self.f3 = nn.Linear(84, 10)

        def forward(self, x):
            x = F.avg_pool2d(F.relu(self.c1(x)), 2)
            x = F.avg_pool2d(F.relu(self.c2(x)), 2)
            x = F.relu(self.f1(x.flatten(1)))
            return self.f3(F.relu(self.f2(x)))

    class CnnWide(nn.Module):
        """gputrain's cnn-wide: conv:32:5:2 relu maxpool:2 conv:64:5:2 relu maxpool:2 fc:1024 relu
        dropout:0.4 fc:10 (3.3 M parameters), with gputrain's parameter names."""
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(1, 32, 5, padding=2)
            self.c2 = nn.Conv2d(32, 64, 5, padding=2)
            self.f1 = nn.Linear(64 * 7 * 7, 1024)
            self.f2 = nn.Linear(1024, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.c1(x)), 2)
            x = F.max_pool2d(F.relu(self.c2(x)), 2)
            x = F.dropout(F.relu(self.f1(x.flatten(1))), 0.4, self.training)
            return self.f2(x)

    MODELS = {"lenet5": LeNet5, "cnn-wide": CnnWide}


def channel_stats(images):
    """--normalize auto's statistics, exactly as gputrain computes them (src/data_input.c,
    gt_data_channel_stats): per channel of uint8 images (N x H x W: one channel; or N x C x H x W)
    the mean and the population standard deviation of x/255 over every pixel, from exact integer
    sums of x and x^2, mean = s1/count and variance = s2/count - mean^2 in double, each (the std
    as sqrt(variance)) divided by 255 and rounded to float32; a constant channel (variance <= 1e-12)
    gets std 1. Returned as gputrain writes them in a checkpoint's metadata "input_norm":
    "M1,M2,.../S1,S2,..." with 9 significant digits (gt_norm_format: each float32 exactly)."""
    import math
    import numpy as np
    imgs = images if images.ndim == 4 else images[:, None]
    if imgs.shape[0] == 0:
        raise ValueError("--normalize auto: the training split is empty")
    count = float(imgs.shape[0]) * float(imgs.shape[2] * imgs.shape[3])
    means, stds = [], []
    for ch in range(imgs.shape[1]):
        hist = np.bincount(np.ascontiguousarray(imgs[:, ch]).reshape(-1), minlength=256)
        s1 = sum(x * int(n) for x, n in enumerate(hist))  # Python integers: exact, as gputrain's uint64
        s2 = sum(x * x * int(n) for x, n in enumerate(hist))
        mean = s1 / count
        var = s2 / count - mean * mean
        means.append(np.float32(mean / 255.0))
        stds.append(np.float32(math.sqrt(var) / 255.0) if var > 1e-12 else np.float32(1.0))
    return ",".join(f"{float(v):.9g}" for v in means) + "/" + ",".join(f"{float(v):.9g}" for v in stds)


def normalise(x, norm):
    """gputrain's input step on float32 x/255 (N x C x H x W numpy): (x - mean) / std per channel in
    float32, the floats gputrain computes (cpu_net.c, the GPU's kernels), with norm "M1,.../S1,..."
    (a checkpoint's metadata input_norm, --normalize). ValueError where norm is not one mean and
    std per channel. The tools' one copy of the formula (gputrain_torch.input_step uses it)."""
    import numpy as np
    try:
        mean, std = ([np.float32(v) for v in part.split(",")] for part in norm.split("/"))
    except ValueError:
        raise ValueError("is not M1,.../S1,...") from None
    if len(mean) != x.shape[1] or len(std) != x.shape[1]:
        raise ValueError("is not one mean and std per channel")
    mean = np.array(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    std = np.array(std, dtype=np.float32).reshape(1, -1, 1, 1)
    return (x - mean) / std


def input_step(images, norm):
    """uint8 images N x H x W through the input step norm (see channel_stats): float32 numpy
    N x 1 x H x W, (x/255 - mean) / std."""
    import numpy as np
    x = images[:, None].astype(np.float32) / np.float32(255.0)
    return normalise(x, norm)


def to_device(images, labels, dev, limit=None, norm=None):
    """Images and labels as tensors on dev: x/255 on the device where norm is None (--normalize none,
    as this reference always did), else input_step(images, norm)."""
    if limit:
        images, labels = images[:limit], labels[:limit]
    if norm is None:
        x = torch.tensor(images, dtype=torch.float32, device=dev).div_(255.0).unsqueeze(1)
    else:
        x = torch.from_numpy(input_step(images, norm)).to(dev)
    return x, torch.tensor(labels.astype(np.int64), device=dev)


def make_optimizer(args, params, capturable):
    if args.opt == "adam":
        return torch.optim.Adam(params, lr=args.lr, capturable=capturable)
    return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)


def test_accuracy(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], 10000):
            correct += int((model(x[i:i + 10000]).argmax(1) == y[i:i + 10000]).sum())
    model.train()
    return correct / x.shape[0]


class EagerStep:
    """One training step as PyTorch code usually runs it; returns the loss tensor (not synced)."""

    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def __call__(self, xb, yb):
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(xb), yb)
        loss.backward()
        self.opt.step()
        return loss.detach()


class GraphStep:
    """The whole step (forward, backward, optimizer) captured once in a CUDA graph and replayed
    on static input buffers; warm-up steps on a side stream first, as CUDA graph capture needs.
    The warm-up's effect is undone in place afterwards (parameters restored, optimizer state
    zeroed, which is what a fresh SGD or Adam state means), so training starts where eager does."""

    def __init__(self, model, opt, x, y, batch):
        self.x = x[:batch].clone()
        self.y = y[:batch].clone()
        start = [p.detach().clone() for p in model.parameters()]
        eager = EagerStep(model, opt)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager(self.x, self.y)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.loss = F.cross_entropy(model(self.x), self.y)
            self.loss.backward()
            opt.step()
        with torch.no_grad():
            for p, p0 in zip(model.parameters(), start):
                p.copy_(p0)
            for state in opt.state.values():
                for v in state.values():
                    if torch.is_tensor(v):
                        v.zero_()

    def __call__(self, xb, yb):
        self.x.copy_(xb)
        self.y.copy_(yb)
        self.graph.replay()
        return self.loss.detach().clone()


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def train_epoch(step, x, y, perm, rank, world, batch):
    """One epoch over this rank's slice of the permutation; returns (samples, summed loss tensor)."""
    per = x.shape[0] // world
    mine = perm[rank * per:(rank + 1) * per]
    steps = per // batch
    total = torch.zeros((), device=x.device)
    for s in range(steps):
        idx = mine[s * batch:(s + 1) * batch]
        total += step(x[idx], y[idx])
    return steps * batch * world, total / max(steps, 1)


def run(rank, args):
    world = args.gpus if args.mode == "ddp" else 1
    dev = torch.device("cpu") if args.device == "cpu" else torch.device("cuda", rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)
        torch.backends.cudnn.allow_tf32 = bool(args.tf32)
        torch.backends.cudnn.benchmark = True
    if world > 1:
        torch.distributed.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    xtr, ytr, xte, yte = load_fmnist(args.data)
    if args.train_samples:
        xtr, ytr = xtr[:args.train_samples], ytr[:args.train_samples]
    norm = channel_stats(xtr) if args.normalize == "auto" else None  # the training split's, as gputrain
    x, y = to_device(xtr, ytr, dev, norm=norm)
    xt, yt = to_device(xte, yte, dev, norm=norm)
    model = MODELS[args.model]().to(dev)
    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model, device_ids=[rank] if dev.type == "cuda" else None)
    if args.compile:
        net = torch.compile(net)
    opt = make_optimizer(args, net.parameters(), capturable=bool(args.graph))
    step = GraphStep(net, opt, x, y, args.batch) if args.graph else EagerStep(net, opt)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    log = open(args.out, "w", encoding="utf-8") if (args.out and rank == 0) else None
    times, accs, losses, samples = [], [], [], 0
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(x.shape[0], device=dev, generator=gen)
        sync(dev)
        t0 = time.perf_counter()
        samples, loss = train_epoch(step, x, y, perm, rank, world, args.batch)
        sync(dev)
        dt = time.perf_counter() - t0
        if rank != 0:
            continue
        acc = test_accuracy(model, xt, yt)
        times.append(round(dt, 4))
        accs.append(round(acc, 4))
        losses.append(round(float(loss), 6))
        rec = {"type": "epoch", "epoch": epoch, "epoch_s": times[-1], "samples": samples,
               "samples_per_s": round(samples / dt, 1), "train_loss": losses[-1], "test_acc": accs[-1]}
        print(f"epoch {epoch:3d}  {dt:8.3f} s  {samples / dt:10.0f} samples/s  train loss {losses[-1]:.4f}  "
              f"test acc {acc:.4f}", flush=True)
        if log:
            log.write(json.dumps(rec) + "\n")
    if rank == 0:
        write_summary(args, log, dev, (world, x.shape[0], samples), times, accs, losses, norm)
    if world > 1:
        torch.distributed.destroy_process_group()


def write_summary(args, log, dev, sizes, times, accs, losses, norm):
    """sizes: (processes, training-set size, samples trained per epoch); norm: the input step's
    "M1,.../S1,..." or None (x/255)."""
    world, n_train, samples = sizes
    steady = statistics.median(times[1:] if len(times) > 1 else times)
    rec = {"type": "summary", "framework": f"pytorch-{torch.__version__}", "mode": args.mode, "gpus": world,
           "device": dev.type, "batch_per_gpu": args.batch, "opt": args.opt, "lr": args.lr,
           "momentum": args.momentum if args.opt == "sgd" else 0, "compile": args.compile, "graph": args.graph,
           "tf32": args.tf32, "seed": args.seed, "epochs": args.epochs, "train_samples": n_train,
           "epoch_samples": samples, "epoch_times": times, "test_acc": accs,
           "train_loss": losses, "normalize": args.normalize, "input_norm": norm or "none",
           "samples_per_s_steady": round(samples / steady, 1) if steady > 0 else 0,
           "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"}
    line = json.dumps(rec)
    if log:
        log.write(line + "\n")
        log.close()
    print(line, flush=True)


def find_data(given):
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    for d in DATA_DIRS:
        d = os.path.join(here, "..", d) if not d.startswith("/") else d
        if os.path.isfile(os.path.join(d, "train-labels-idx1-ubyte.gz")):
            return d
    return ""


def parse_args(argv):
    p = argparse.ArgumentParser(prog="torch_lenet.py", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="", help="Fashion-MNIST folder (IDX .gz; default datasets/fashion-mnist, "
                   "then /usr/share/datasets/fashion-mnist)")
    p.add_argument("--mode", default="single", choices=["single", "ddp"])
    p.add_argument("--model", default="lenet5", choices=["lenet5", "cnn-wide"], help="gputrain's model of that name")
    p.add_argument("--gpus", type=int, default=1, help="processes (GPUs) in ddp mode")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: for a check without a GPU")
    p.add_argument("--batch", type=int, default=64, help="batch per GPU")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--opt", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compile", type=int, default=0, choices=[0, 1], help="torch.compile the model")
    p.add_argument("--graph", type=int, default=0, choices=[0, 1], help="the whole step in one CUDA graph")
    p.add_argument("--tf32", type=int, default=0, choices=[0, 1], help="allow TF32 matmuls and convolutions")
    p.add_argument("--train-samples", type=int, default=0, help="train on the first N samples (default: all)")
    p.add_argument("--normalize", default="auto", choices=["auto", "none"],
                   help="input step, as gputrain's --normalize: auto, (x/255 - mean) / std per channel with "
                   "the training split's mean and std (default); none, x/255")
    p.add_argument("--out", default="", help="JSONL file to write")
    a = p.parse_args(argv)
    for name in ("gpus", "batch", "epochs"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: must be >= 1, not {getattr(a, name)}")
    if a.lr <= 0 or not 0 <= a.momentum < 1 or a.train_samples < 0:
        p.error("--lr must be > 0, --momentum in [0, 1), --train-samples >= 0")
    if a.mode == "single" and a.gpus != 1:
        p.error("--gpus N > 1 needs --mode ddp")
    if a.graph and (a.mode == "ddp" or a.device == "cpu"):
        p.error("--graph 1 works in --mode single on a GPU")
    a.data = find_data(a.data)
    if not a.data or not os.path.isfile(os.path.join(a.data, "train-labels-idx1-ubyte.gz")):
        p.error(f"--data: no Fashion-MNIST (train-labels-idx1-ubyte.gz) in '{a.data or 'the default folders'}'")
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if torch is None:
        print("torch_lenet: python3 cannot import torch and numpy (pip install torch numpy)", file=sys.stderr)
        return 1
    if args.device == "cuda" and torch.cuda.device_count() < args.gpus:
        print(f"torch_lenet: --gpus {args.gpus}: only {torch.cuda.device_count()} CUDA devices", file=sys.stderr)
        return 1
    if args.mode == "ddp":
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        torch.multiprocessing.spawn(run, args=(args,), nprocs=args.gpus, join=True)
    else:
        run(0, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
