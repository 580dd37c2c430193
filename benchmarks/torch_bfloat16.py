"""The PyTorch side of `benchmarks.bfloat16`, run inside the PyTorch environment: the peer's
`Net` (channels_last, its fastest CPU layout) on the weights advjax exported, in float32 and
under `torch.autocast("cpu", dtype=torch.bfloat16)`, timing the same three workloads and
scoring bfloat16's top-1 agreement with float32 on the same images.

Reads an .npz (weights in PyTorch layout, NCHW images in [0, 1], labels) and writes one JSON.
"""

import argparse
import contextlib
import json
import statistics
import time

import torch
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--peer-dir", required=True)
    p.add_argument("--inputs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--batch", type=int, default=250)
    p.add_argument("--train-batch", type=int, default=128)
    a = p.parse_args()
    from torch_autoattack import read_inputs  # beside this file

    torch.set_num_threads(a.threads)
    model, x, y, _ = read_inputs(a.peer_dir, a.inputs)
    model = model.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
    xb, yb = x[: a.batch], y[: a.batch]
    xt, yt = x[: a.train_batch], y[: a.train_batch]

    def precision(dtype):
        if dtype == "float32":
            return contextlib.nullcontext()
        return torch.autocast("cpu", dtype=torch.bfloat16)

    def inference(dtype):
        model.eval()
        with torch.no_grad(), precision(dtype):
            return model(xb).float()

    def input_gradient(dtype):
        model.eval()
        xg = xb.clone().requires_grad_(True)
        with precision(dtype):
            loss = F.cross_entropy(model(xg).float(), yb)
        return torch.autograd.grad(loss, xg)[0]

    def train_gradient(dtype):
        model.train()
        with precision(dtype):
            loss = F.cross_entropy(model(xt).float(), yt)
        grads = torch.autograd.grad(loss, [q for q in model.parameters()])
        model.eval()
        return grads

    workloads = {
        "inference": (inference, a.batch),
        "input_gradient": (input_gradient, a.batch),
        "train_gradient": (train_gradient, a.train_batch),
    }
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rows = []
    for name, (fn, images) in workloads.items():
        for dtype in ("float32", "bfloat16"):
            fn(dtype)
            times = []
            for _ in range(a.reps):
                started = time.perf_counter()
                fn(dtype)
                times.append(time.perf_counter() - started)
            model.load_state_dict(state)  # train mode moved the running statistics
            rows.append({"workload": name, "dtype": dtype, "images": images,
                         "times_s": times, "images_per_s": images / statistics.median(times)})  # fmt: skip
    with torch.no_grad():
        model.eval()
        top = {}
        for dtype in ("float32", "bfloat16"):
            with precision(dtype):
                top[dtype] = torch.cat([model(x[i : i + 250]).float().argmax(1)
                                        for i in range(0, len(y), 250)])  # fmt: skip
    result = {
        "torch": torch.__version__,
        "threads": a.threads,
        "layout": "channels_last",
        "rows": rows,
        "top1_agreement": int((top["float32"] == top["bfloat16"]).sum()),
        "accuracy": {k: float((v == y).float().mean()) for k, v in top.items()},
        "n": len(y),
    }
    with open(a.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
