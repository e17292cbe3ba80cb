#!/usr/bin/env python3
"""How exact PyTorch's fp32 convolutions are: for resnet18's 3x3 convolution shapes at one batch,
the forward, input gradient and weight gradient that cuDNN computes (cudnn.benchmark on, TF32 off:
PyTorch's fp32) against float64, as relative L2 distances. What gputrain's fp32 accuracy check
(cuda/conv_engine.cu) may ask of a configuration: a weight gradient at batch 256 sums 65,536 to
262,144 products, and its fp32 result lands ~1e-5 from float64 by summation order alone.

Usage: tools/torch_conv_precision.py [--batch 256]   (needs a CUDA GPU and PyTorch)
"""
import argparse

SHAPES = [(3, 64, 32, 1), (64, 64, 32, 1), (64, 128, 32, 2), (128, 128, 16, 1), (128, 256, 16, 2),
          (256, 256, 8, 1), (256, 512, 8, 2), (512, 512, 4, 1)]


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256)
    a = p.parse_args()
    if a.batch < 1:
        p.error(f"--batch: {a.batch} is not a positive number")
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        raise SystemExit("torch_conv_precision.py: PyTorch does not import here")
    if not torch.cuda.is_available():
        raise SystemExit("torch_conv_precision.py: no CUDA GPU")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(1)
    print(f"batch {a.batch}: in out side stride | forward input-grad weight-grad "
          "(relative L2 to float64)")
    for cin, cout, hw, st in SHAPES:
        x = torch.randn(a.batch, cin, hw, hw, device="cuda", generator=g, requires_grad=True)
        w = torch.randn(cout, cin, 3, 3, device="cuda", generator=g, requires_grad=True)
        for _ in range(3):  # benchmark mode chooses on the first runs
            y = F.conv2d(x, w, stride=st, padding=1)
            dy = torch.randn_like(y)
            gx, gw = torch.autograd.grad(y, (x, w), dy)
        xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        yd = F.conv2d(xd, wd, stride=st, padding=1)
        gxd, gwd = torch.autograd.grad(yd, (xd, wd), dy.double())
        print(f"{cin} {cout} {hw} {st} | {rel(y, yd):.2e} {rel(gx, gxd):.2e} {rel(gw, gwd):.2e}")


if __name__ == "__main__":
    main()
