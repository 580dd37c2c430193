"""The PyTorch side of `benchmarks.any_model`, run inside the PyTorch environment: the same
architectures as `benchmarks/user_models.py` with the weights advjax exported, and
torchattacks' PGD on the same images, timed.

Reads an .npz (arch, weights in PyTorch layout, NCHW images in [0, 1], labels, advjax's
logits) and writes one JSON: seconds per repetition for NCHW and channels_last, the largest
logit difference to advjax.
"""

import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv2d(c_in, c_out, 3, padding=1)
            for c_in, c_out in ((3, 32), (32, 32), (32, 64), (64, 64))
        )
        self.fc0 = nn.Linear(8 * 8 * 64, 128)
        self.fc1 = nn.Linear(128, 10)

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = F.relu(conv(x))
            if i % 2:
                x = F.max_pool2d(x, 2)
        return self.fc1(F.relu(self.fc0(x.flatten(1))))

    def load(self, w):
        for i, conv in enumerate(self.convs):
            conv.weight.copy_(w[f"conv{i}"])
            conv.bias.copy_(w[f"conv{i}_b"])
        for name in ("fc0", "fc1"):
            getattr(self, name).weight.copy_(w[name])
            getattr(self, name).bias.copy_(w[f"{name}_b"])


class Block(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv0 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1)
        self.conv1 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.proj = nn.Conv2d(c_in, c_out, 1, stride=stride) if stride != 1 else None

    def forward(self, x):
        y = self.conv1(F.relu(self.conv0(x)))
        return F.relu((x if self.proj is None else self.proj(x)) + y)


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = nn.ModuleList([Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2)])
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=(2, 3)))

    def load(self, w):
        layers = {"stem": self.stem, "head": self.head}
        for b, block in enumerate(self.blocks):
            layers[f"b{b}_conv0"], layers[f"b{b}_conv1"] = block.conv0, block.conv1
            if block.proj is not None:
                layers[f"b{b}_proj"] = block.proj
        for name, layer in layers.items():
            layer.weight.copy_(w[name])
            layer.bias.copy_(w[f"{name}_b"])


def _padding_same(model):
    """JAX's 'SAME' padding of a stride-2 3x3 convolution on an even size pads (0, 1), not
    (1, 1): pad the input explicitly for those layers so both compute the same function."""
    for module in model.modules():
        if (
            isinstance(module, nn.Conv2d)
            and module.stride == (2, 2)
            and module.kernel_size == (3, 3)
        ):
            module.padding = (0, 0)
            forward = module.forward
            module.forward = lambda x, forward=forward: forward(F.pad(x, (0, 1, 0, 1)))
    return model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--inputs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--batch", type=int, default=250)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    import torchattacks

    torch.set_num_threads(a.threads)
    d = dict(np.load(a.inputs))
    arch = str(d.pop("arch"))
    x, y = torch.from_numpy(d.pop("x")), torch.from_numpy(d.pop("y")).long()
    advjax_logits = d.pop("logits")
    model = CNN() if arch == "cnn" else _padding_same(ResNet())
    with torch.no_grad():
        model.load({k: torch.from_numpy(v) for k, v in d.items()})
    model.eval()
    result = {"torch": torch.__version__, "threads": a.threads, "seconds": {}}
    with torch.no_grad():
        logits = model(x).numpy()
    result["max_logit_difference"] = float(np.abs(logits - advjax_logits).max())
    for layout in ("nchw", "channels_last"):
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        model = model.to(memory_format=fmt)
        attack = torchattacks.PGD(
            model, eps=8 / 255, alpha=2 / 255, steps=a.steps, random_start=True
        )
        batches = [(x[i : i + a.batch].contiguous(memory_format=fmt), y[i : i + a.batch])
                   for i in range(0, len(y), a.batch)]  # fmt: skip
        attack(*batches[0])  # warm-up
        times = []
        for _ in range(a.reps):
            start = time.perf_counter()
            for xb, yb in batches:
                attack(xb, yb)
            times.append(time.perf_counter() - start)
        result["seconds"][layout] = times
    with open(a.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
