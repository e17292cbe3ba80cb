#!/usr/bin/env python3
"""torch_resnet.py - gputrain's PyTorch reference for its residual networks, resnet20 and resnet18,
trained the fast way PyTorch allows (data resident on the GPU, no DataLoader), so that comparisons
measure gputrain against PyTorch at its best.

Models (gputrain's built-ins of those names, with its names:resnet parameter names): a basic block
is conv3x3(stride s) BN ReLU conv3x3 BN plus the shortcut, then ReLU; the shortcut is the identity,
or conv1x1(stride s) BN where the shape changes. Convolutions have no bias.
  resnet20: stem conv3x3 16 BN ReLU; 3 stages of 3 blocks at 16, 32, 64 channels, strides 1, 2, 2;
            global average pool; fc (0.27 M parameters at 3 input channels).
  resnet18: stem conv3x3 64 BN ReLU (no max-pool); 4 stages of 2 blocks at 64, 128, 256, 512
            channels, strides 1, 2, 2, 2; global average pool; fc (11.2 M parameters).
Modules: stem = Sequential(conv, bn, relu), layers = Sequential of blocks (c1 b1 c2 b2, short =
Sequential(conv1x1, bn) or None), fc; BatchNorm momentum 0.1, eps 1e-5; convolutions He-normal
(fan_out), BN gamma 1 beta 0, fc PyTorch's default.

Data: Fashion-MNIST (--data DIR, .gz IDX files, pixels / 255, 1x28x28), or --synthetic N --shape
CxHxW (uniform random images, random labels, no test set: for throughput only). The data stays on
the GPU. --augment 1: per sample, on the GPU, a random crop with 2 pixels of zero padding and a
random horizontal flip.

Recipe: SGD, momentum 0.9, Nesterov, weight decay 5e-4 (not on BN parameters and biases); peak lr
--lr (for batch 128 per GPU) scaled linearly with the global batch; linear warm-up over the first
epoch, then cosine to 0 at the last step. Cross-entropy loss.

Speed: --amp fp32 (exact float32) | tf32 (TF32 matmuls and convolutions) | bf16 (bf16 autocast, TF32
elsewhere); --channels-last 1 (NHWC model and inputs); --graph 1 captures the whole training step
(forward, backward, the optimizer and the lr as a device tensor) in one CUDA graph (one GPU, no
augmentation); --compile 1 runs the model through torch.compile.

Modes: one GPU (--gpus 1), or DistributedDataParallel over --gpus N GPUs, one process each started
here (torch.multiprocessing.spawn), or under torchrun (WORLD_SIZE, RANK, LOCAL_RANK in the
environment); NCCL; --batch is per GPU and each GPU takes its own slice of every epoch's
permutation. --device cpu runs on the CPU, --gpus N processes over gloo (a check without a GPU).

Prints one line per epoch and writes --out FILE.jsonl: one {"type": "epoch"} record per epoch and a
final {"type": "summary"} record, which is also the last line on stdout: epoch_times (training
only, evaluation excluded), test_acc per epoch, samples_per_s_steady (an epoch's samples over the
median epoch time after the first; images_per_s_steady the same), time_to_acc {threshold:
cumulative training seconds when the test accuracy first reached it, or null}, time_to_acc_wall
(the same from the first epoch's start, evaluations included, as gputrain's wall_s counts),
parameters, card. Exit status 2 on a command-line error.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # --help, the argument checks and gputrain_spec work without them
    torch = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_lenet import find_data, load_fmnist, sync  # noqa: E402  (shared with the LeNet reference)
# (stem width, [(channels, blocks, first stride) per stage]) of each model.
ARCHS = {
    "resnet20": (16, [(16, 3, 1), (32, 3, 2), (64, 3, 2)]),
    "resnet18": (64, [(64, 2, 1), (128, 2, 2), (256, 2, 2), (512, 2, 2)]),
}
BN_EPS, BN_MOMENTUM = 1e-5, 0.1
BASE_BATCH = 128


def gputrain_spec(name, nclasses=10):
    """The canonical model_spec gputrain writes into a checkpoint of built-in `name` (src/model.c):
    the blocks spelled out, a stride of 1 left out of conv tokens. gputrain_torch.py builds this
    reference for a checkpoint whose spec is this text."""
    stem, stages = ARCHS[name]

    def conv(c, k, pad, stride):
        return f"conv:{c}:{k}:{pad}" + (f":{stride}" if stride != 1 else "") + ":nobias"
    toks = ["init:kaiming", "names:resnet", conv(stem, 3, 1, 1), "bn", "relu"]
    c_in = stem
    for c, blocks, stride in stages:
        for b in range(blocks):
            s = stride if b == 0 else 1
            toks += ["res[", conv(c, 3, 1, s), "bn", "relu", conv(c, 3, 1, 1), "bn"]
            if s != 1 or c_in != c:
                toks += ["|", conv(c, 1, 0, s), "bn"]
            toks += ["]", "relu"]
            c_in = c
    return " ".join(toks + ["gap", f"fc:{nclasses}"])


if torch is not None:
    class Block(nn.Module):
        """The basic block: conv3x3(stride) BN ReLU conv3x3 BN, plus the shortcut, then ReLU."""

        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.c1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(c_out, eps=BN_EPS, momentum=BN_MOMENTUM)
            self.c2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(c_out, eps=BN_EPS, momentum=BN_MOMENTUM)
            self.short = None
            if stride != 1 or c_in != c_out:
                self.short = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, 0, bias=False),
                                           nn.BatchNorm2d(c_out, eps=BN_EPS, momentum=BN_MOMENTUM))

        def forward(self, x):
            y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
            return F.relu(y + (x if self.short is None else self.short(x)))

    class ResNet(nn.Module):
        """resnet20 or resnet18 for in_c input channels and nclasses classes."""

        def __init__(self, name, in_c=3, nclasses=10):
            super().__init__()
            stem, stages = ARCHS[name]
            self.stem = nn.Sequential(nn.Conv2d(in_c, stem, 3, 1, 1, bias=False),
                                      nn.BatchNorm2d(stem, eps=BN_EPS, momentum=BN_MOMENTUM), nn.ReLU())
            blocks, c = [], stem
            for width, count, stride in stages:
                for b in range(count):
                    blocks.append(Block(c, width, stride if b == 0 else 1))
                    c = width
            self.layers = nn.Sequential(*blocks)
            self.fc = nn.Linear(c, nclasses)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def augment(x, gen):
    """Per sample: a random crop of the image padded by 2 zero pixels a side, and a horizontal flip
    with probability 1/2; all on x's device."""
    n, _, h, w = x.shape
    dev = x.device
    padded = F.pad(x, (2, 2, 2, 2))
    oy = torch.randint(0, 5, (n, 1), device=dev, generator=gen)
    ox = torch.randint(0, 5, (n, 1), device=dev, generator=gen)
    flip = torch.randint(0, 2, (n, 1), device=dev, generator=gen).bool()
    rows = oy + torch.arange(h, device=dev)
    cols_ = torch.arange(w, device=dev)
    cols = ox + torch.where(flip, w - 1 - cols_, cols_)
    idx = torch.arange(n, device=dev)[:, None, None]
    return padded[idx, :, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)  # N H W C, seen as NCHW


def param_groups(model):
    """Weight decay on the weights of convolutions and fc, not on BN parameters and biases."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    plain = [p for p in model.parameters() if p.ndim <= 1]
    return decay, plain


class Schedule:
    """Linear warm-up over the first epoch, then cosine to 0 at the last step."""

    def __init__(self, peak, steps_per_epoch, epochs):
        self.peak, self.warm, self.total = peak, steps_per_epoch, steps_per_epoch * epochs

    def __call__(self, step):
        if step < self.warm:
            return self.peak * (step + 1) / self.warm
        if self.total <= self.warm:
            return self.peak
        return self.peak * 0.5 * (1 + math.cos(math.pi * (step - self.warm) / (self.total - self.warm)))


class Stepper:
    """The loss and the forward/backward of one step, under autocast when bf16."""

    def __init__(self, net, args, dev, gen):
        self.net, self.args, self.dev, self.gen = net, args, dev, gen
        self.bf16 = args.amp == "bf16"
        self.cl = bool(args.channels_last)

    def loss(self, xb, yb, cache=True):
        if self.args.augment:
            xb = augment(xb, self.gen)
        xb = xb.contiguous(memory_format=torch.channels_last if self.cl else torch.contiguous_format)
        with torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=cache):
            return F.cross_entropy(self.net(xb), yb)


class EagerStep:
    """One training step as PyTorch code usually runs it (torch.optim.SGD, foreach); returns the
    loss tensor (not synced)."""

    def __init__(self, stepper, model, args, lr_at):
        self.s, self.lr_at = stepper, lr_at
        decay, plain = param_groups(model)
        self.opt = torch.optim.SGD([{"params": decay, "weight_decay": args.wd},
                                    {"params": plain, "weight_decay": 0.0}],
                                   lr=lr_at(0), momentum=args.momentum, nesterov=True)

    def __call__(self, xb, yb, step):
        lr = self.lr_at(step)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss = self.s.loss(xb, yb)
        loss.backward()
        self.opt.step()
        return loss.detach()


class GraphStep:
    """The whole step captured once in a CUDA graph and replayed on static input buffers: forward,
    backward and SGD with Nesterov momentum and weight decay written with foreach ops, the lr read
    from a device tensor set before each replay (torch.optim.SGD bakes a float lr into the graph).
    Warm-up steps run on a side stream first, as capture needs; the parameters, BN buffers and
    momentum buffers are restored in place afterwards, so training starts where eager does."""

    def __init__(self, stepper, model, args, lr_at, x, y):
        self.s, self.lr_at = stepper, lr_at
        batch = args.batch
        self.x, self.y = x[:batch].clone(), y[:batch].clone()
        self.decay, self.plain = param_groups(model)
        self.params = self.decay + self.plain
        self.bufs = [torch.zeros_like(p) for p in self.params]
        self.lr = torch.zeros((), device=x.device)
        self.wd, self.m = args.wd, args.momentum
        self.foreach_lr = None  # whether _foreach_mul_ takes the lr tensor (newer PyTorch)
        start = {k: v.detach().clone() for k, v in model.state_dict().items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.loss = self._step()
        with torch.no_grad():
            for k, v in model.state_dict().items():
                v.copy_(start[k])
            for b in self.bufs:
                b.zero_()

    def _step(self):
        for p in self.params:
            p.grad = None
        loss = self.s.loss(self.x, self.y, cache=False)
        loss.backward()
        with torch.no_grad():
            grads = [p.grad for p in self.params]
            nd = len(self.decay)
            if nd:
                torch._foreach_add_(grads[:nd], self.params[:nd], alpha=self.wd)
            torch._foreach_mul_(self.bufs, self.m)
            torch._foreach_add_(self.bufs, grads)
            torch._foreach_add_(grads, self.bufs, alpha=self.m)  # Nesterov: g + m * buf
            if self.foreach_lr is None:  # the first warm-up step, outside capture, finds out
                try:
                    torch._foreach_mul_(grads, self.lr)
                    self.foreach_lr = True
                except (TypeError, RuntimeError):
                    self.foreach_lr = False
                    torch._foreach_mul_(grads, 0.0)  # nothing to undo: the warm-up is undone anyway
            elif self.foreach_lr:
                torch._foreach_mul_(grads, self.lr)
            else:
                for g in grads:
                    g.mul_(self.lr)
            torch._foreach_sub_(self.params, grads)
        return loss.detach()

    def __call__(self, xb, yb, step):
        self.lr.fill_(self.lr_at(step))
        self.x.copy_(xb)
        self.y.copy_(yb)
        self.graph.replay()
        return self.loss.clone()


def test_accuracy(model, x, y, args, dev):
    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.amp == "bf16"):
        for i in range(0, x.shape[0], 1000):
            xb = x[i:i + 1000]
            if args.channels_last:
                xb = xb.contiguous(memory_format=torch.channels_last)
            correct += int((model(xb).argmax(1) == y[i:i + 1000]).sum())
    model.train()
    return correct / x.shape[0]


def load_data(args, dev):
    """(train x, train y, test x or None, test y or None) on dev: floats in [0, 1], int64 labels."""
    if args.synthetic:
        c, h, w = args.shape
        g = torch.Generator(device="cpu")
        g.manual_seed(1234)
        x = torch.rand((args.synthetic, c, h, w), generator=g)
        y = torch.randint(0, 10, (args.synthetic,), generator=g)
        return x.to(dev), y.to(dev), None, None
    xtr, ytr, xte, yte = load_fmnist(args.data)
    if args.train_samples:
        xtr, ytr = xtr[:args.train_samples], ytr[:args.train_samples]

    def put(images, labels):
        x = torch.tensor(images, dtype=torch.float32, device=dev).div_(255.0).unsqueeze(1)
        return x, torch.tensor(labels.astype(np.int64), device=dev)
    return put(xtr, ytr) + put(xte, yte)


def setup(rank, world, args):
    """The device of this process (LOCAL_RANK under torchrun), with the precision flags set and the
    process group joined."""
    local = int(os.environ.get("LOCAL_RANK", rank)) if args.torchrun else rank
    dev = torch.device("cpu") if args.device == "cpu" else torch.device("cuda", local)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        tf32 = args.amp != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
    if world > 1:
        torch.distributed.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank,
                                             world_size=world)
    return dev


def run(rank, args, world=None):
    world = world or args.gpus
    dev = setup(rank, world, args)
    torch.manual_seed(args.seed)
    x, y, xt, yt = load_data(args, dev)
    model = ResNet(args.model, x.shape[1], 10).to(dev)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model, device_ids=[rank] if dev.type == "cuda" else None)
    if args.compile:
        net = torch.compile(net)
    per = x.shape[0] // world
    steps = per // args.batch
    lr_at = Schedule(args.lr * args.batch * world / BASE_BATCH, steps, args.epochs)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    aug_gen = torch.Generator(device=dev)
    aug_gen.manual_seed(args.seed * 1000003 + rank)
    stepper = Stepper(net, args, dev, aug_gen)
    step = GraphStep(stepper, net, args, lr_at, x, y) if args.graph else EagerStep(stepper, net, args, lr_at)
    log = open(args.out, "w", encoding="utf-8") if (args.out and rank == 0) else None
    times, accs, losses, reached, trained = [], [], [], {}, 0.0
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(x.shape[0], device=dev, generator=gen)
        mine = perm[rank * per:(rank + 1) * per]
        sync(dev)
        t0 = time.perf_counter()
        total = torch.zeros((), device=dev)
        for s in range(steps):
            idx = mine[s * args.batch:(s + 1) * args.batch]
            total += step(x[idx], y[idx], (epoch - 1) * steps + s)
        sync(dev)
        dt = time.perf_counter() - t0
        if rank != 0:
            continue
        trained += dt
        acc = test_accuracy(model, xt, yt, args, dev) if xt is not None else None
        times.append(round(dt, 4))
        accs.append(None if acc is None else round(acc, 4))
        losses.append(round(float(total) / max(steps, 1), 6))
        for t in args.targets:
            if acc is not None and acc >= t and t not in reached:
                reached[t] = (round(trained, 3), round(time.perf_counter() - start, 3))
        samples = steps * args.batch * world
        rec = {"type": "epoch", "epoch": epoch, "epoch_s": times[-1], "samples": samples,
               "samples_per_s": round(samples / dt, 1), "train_loss": losses[-1], "test_acc": accs[-1],
               "lr_end": lr_at(epoch * steps - 1)}
        print(f"epoch {epoch:3d}  {dt:8.3f} s  {samples / dt:10.0f} samples/s  train loss {losses[-1]:.4f}"
              + ("" if acc is None else f"  test acc {acc:.4f}"), flush=True)
        if log:
            log.write(json.dumps(rec) + "\n")
    if rank == 0:
        nparams = sum(p.numel() for p in model.parameters())
        write_summary(args, log, dev, (world, x.shape, steps * args.batch * world, nparams), times, accs,
                      losses, reached)
    if world > 1:
        torch.distributed.destroy_process_group()


def write_summary(args, log, dev, sizes, times, accs, losses, reached):
    """sizes: (processes, training-set shape, samples trained per epoch, parameters)."""
    world, shape, samples, nparams = sizes
    steady = statistics.median(times[1:] if len(times) > 1 else times)
    rec = {"type": "summary", "framework": f"pytorch-{torch.__version__}", "model": args.model,
           "parameters": nparams, "gpus": world, "mode": "ddp" if world > 1 else "single", "device": dev.type,
           "data": f"synthetic:{'x'.join(map(str, args.shape))}" if args.synthetic else "fashion-mnist",
           "in_shape": "x".join(str(d) for d in shape[1:]), "train_samples": shape[0],
           "batch_per_gpu": args.batch, "global_batch": args.batch * world,
           "lr_peak": args.lr * args.batch * world / BASE_BATCH, "momentum": args.momentum, "nesterov": True,
           "weight_decay": args.wd, "amp": args.amp, "channels_last": args.channels_last, "graph": args.graph,
           "compile": args.compile, "augment": args.augment, "seed": args.seed, "epochs": args.epochs,
           "epoch_samples": samples, "epoch_times": times, "test_acc": accs, "train_loss": losses,
           "samples_per_s_steady": round(samples / steady, 1) if steady > 0 else 0,
           "images_per_s_steady": round(samples / steady, 1) if steady > 0 else 0,
           "time_to_acc": {f"{t:g}": reached.get(t, (None,))[0] for t in args.targets},
           "time_to_acc_wall": {f"{t:g}": reached.get(t, (None, None))[1] for t in args.targets},
           "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"}
    line = json.dumps(rec)
    if log:
        log.write(line + "\n")
        log.close()
    print(line, flush=True)


def parse_shape(text):
    parts = text.split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"'{text}' is not CxHxW")
    return tuple(int(p) for p in parts)


def parse_targets(text):
    try:
        vals = [float(t) for t in text.split(",") if t]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of accuracies") from None
    if not all(0 < v <= 1 for v in vals):
        raise argparse.ArgumentTypeError(f"'{text}': accuracies are in (0, 1]")
    return vals


def parse_args(argv):
    p = argparse.ArgumentParser(prog="torch_resnet.py", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet20", choices=sorted(ARCHS))
    p.add_argument("--data", default="", help="Fashion-MNIST folder (IDX .gz; default datasets/fashion-mnist, "
                   "then /usr/share/datasets/fashion-mnist)")
    p.add_argument("--synthetic", type=int, default=0, metavar="N", help="N random training images instead of data")
    p.add_argument("--shape", type=parse_shape, default=(3, 32, 32), help="CxHxW of --synthetic images (3x32x32)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs (processes, DDP when > 1)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: for a check without a GPU")
    p.add_argument("--batch", type=int, default=128, help="batch per GPU")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.1, help="peak lr for batch 128 per GPU (scaled with the global batch)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (Nesterov)")
    p.add_argument("--wd", type=float, default=5e-4, help="weight decay (not on BN parameters and biases)")
    p.add_argument("--amp", default="fp32", choices=["fp32", "tf32", "bf16"])
    p.add_argument("--channels-last", type=int, default=0, choices=[0, 1])
    p.add_argument("--graph", type=int, default=0, choices=[0, 1], help="the whole step in one CUDA graph")
    p.add_argument("--compile", type=int, default=0, choices=[0, 1], help="torch.compile the model")
    p.add_argument("--augment", type=int, default=0, choices=[0, 1], help="random crop (pad 2) and flip")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-samples", type=int, default=0, help="train on the first N samples (default: all)")
    p.add_argument("--targets", type=parse_targets, default=[0.90, 0.92, 0.93],
                   help="accuracies for time_to_acc (default 0.9,0.92,0.93)")
    p.add_argument("--out", default="", help="JSONL file to write")
    a = p.parse_args(argv)
    for name in ("gpus", "batch", "epochs"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: must be >= 1, not {getattr(a, name)}")
    if a.lr <= 0 or not 0 <= a.momentum < 1 or a.wd < 0 or a.train_samples < 0 or a.synthetic < 0:
        p.error("--lr must be > 0, --momentum in [0, 1), --wd, --train-samples and --synthetic >= 0")
    a.torchrun = "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ
    if a.torchrun:
        a.gpus = int(os.environ["WORLD_SIZE"])
    if a.graph and (a.gpus > 1 or a.device == "cpu" or a.augment or a.compile):
        p.error("--graph 1 works on one GPU, without --augment and --compile")
    if a.device == "cpu" and a.amp != "fp32":
        p.error("--device cpu runs in fp32 (--gpus N: N processes over gloo)")
    if a.synthetic:
        if a.synthetic < a.batch * a.gpus:
            p.error(f"--synthetic {a.synthetic}: fewer images than one global batch ({a.batch * a.gpus})")
        return a
    a.data = find_data(a.data)
    if not a.data or not os.path.isfile(os.path.join(a.data, "train-labels-idx1-ubyte.gz")):
        p.error(f"--data: no Fashion-MNIST (train-labels-idx1-ubyte.gz) in '{a.data or 'the default folders'}'")
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if torch is None:
        print("torch_resnet: python3 cannot import torch and numpy (pip install torch numpy)", file=sys.stderr)
        return 1
    if args.torchrun:
        run(int(os.environ["RANK"]), args, int(os.environ["WORLD_SIZE"]))
        return 0
    if args.device == "cuda" and torch.cuda.device_count() < args.gpus:
        print(f"torch_resnet: --gpus {args.gpus}: only {torch.cuda.device_count()} CUDA devices", file=sys.stderr)
        return 1
    if args.gpus > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        torch.multiprocessing.spawn(run, args=(args,), nprocs=args.gpus, join=True)
    else:
        run(0, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
