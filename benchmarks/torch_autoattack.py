"""The PyTorch AutoAttack peer, run inside the PyTorch environment by
`benchmarks.autoattack_peer`: torchattacks' standard AutoAttack members (APGD-CE, APGD-T,
FAB-T, Square 5,000 queries; the settings of `torchattacks.AutoAttack(version="standard")`)
on the weights advjax exported, each member on the cases still robust, timed one by one.

Reads an .npz (weights in PyTorch layout, NCHW images in [0, 1], labels, advjax's logits)
and writes one JSON: per-case robust flags, per-member robust counts and seconds, the
largest logit difference to advjax, peak memory.
"""

import argparse
import json
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn


def peak_rss_mib() -> float:
    """This process's own peak resident memory (VmHWM). Not `ru_maxrss`: Linux carries that
    over `execve`, so a subprocess of a large parent would report the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(peer_dir: str, weights: dict, activation: str) -> nn.Module:
    sys.path.insert(0, peer_dir)
    from torch_reference import Net  # the peer's CNN: the same layers as advjax's CompactCNN

    model = Net()
    if activation == "silu":
        for parent in (model.features, model.classifier):
            for i, layer in enumerate(parent):
                if isinstance(layer, nn.ReLU):
                    parent[i] = nn.SiLU()
    convs = [m for m in model.features if isinstance(m, nn.Conv2d)]
    norms = [m for m in model.features if isinstance(m, nn.BatchNorm2d)]
    linears = [m for m in model.classifier if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for i, conv in enumerate(convs):
            conv.weight.copy_(torch.from_numpy(weights[f"conv{i}"]))
        for i, bn in enumerate(norms):
            for name in ("weight", "bias", "running_mean", "running_var"):
                getattr(bn, name).copy_(torch.from_numpy(weights[f"bn{i}_{name}"]))
        for i, linear in enumerate(linears):
            linear.weight.copy_(torch.from_numpy(weights[f"dense{i}_weight"]))
            linear.bias.copy_(torch.from_numpy(weights[f"dense{i}_bias"]))
    return model.eval()


def read_inputs(peer_dir: str, path: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor, dict]:
    """The peer `Net` with the exported weights (eval mode), NCHW images, labels and every
    array of the .npz that `benchmarks.autoattack_peer.run_torch_script` wrote (weights and
    any others, such as advjax's logits, by name)."""
    d = dict(np.load(path))
    activation = str(d.pop("activation"))
    x, y = torch.from_numpy(d.pop("x")), torch.from_numpy(d.pop("y")).long()
    return build(peer_dir, d, activation), x, y, d


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--peer-dir", required=True)
    p.add_argument("--inputs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=100, help="APGD / FAB iterations")
    a = p.parse_args()
    import torchattacks

    torch.set_num_threads(a.threads)
    model, x, y, extra = read_inputs(a.peer_dir, a.inputs)
    advjax_logits = extra["logits"]
    with torch.no_grad():
        logits = torch.cat([model(x[i : i + 250]) for i in range(0, len(y), 250)]).numpy()
    gap = float(np.abs(logits - advjax_logits).max())
    eps = 8 / 255
    # torchattacks.AutoAttack leaves steps at its default of 10; the original AutoAttack's
    # standard version runs 100, which is what advjax runs, so the peer runs 100 too
    common = dict(norm="Linf", eps=eps, seed=a.seed, n_restarts=1)
    members = [
        ("apgd-ce", torchattacks.APGD(model, loss="ce", steps=a.steps, **common)),
        ("apgd-t", torchattacks.APGDT(model, n_classes=10, steps=a.steps, **common)),
        ("fab-t", torchattacks.FAB(model, multi_targeted=True, n_classes=10, steps=a.steps, **common)),
        ("square", torchattacks.Square(model, n_queries=5000, **common)),
    ]  # fmt: skip
    robust = torch.from_numpy(logits.argmax(1)) == y
    rows = [{"member": "clean", "robust": int(robust.sum()), "seconds": 0.0}]
    for name, attack in members:
        started = time.perf_counter()
        index = torch.nonzero(robust).flatten()
        for i in range(0, len(index), 250):
            part = index[i : i + 250]
            x_adv = attack(x[part], y[part])
            with torch.no_grad():
                robust[part] = model(x_adv).argmax(1) == y[part]
        rows.append({"member": name, "robust": int(robust.sum()),
                     "seconds": time.perf_counter() - started})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "torch": torch.__version__,
        "torchattacks": torchattacks.__version__,
        "threads": a.threads,
        "steps": a.steps,
        "max_logit_difference": gap,
        "members": rows,
        "robust": robust.numpy().astype(int).tolist(),
        "peak_rss_mib": peak_rss_mib(),
    }
    with open(a.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
