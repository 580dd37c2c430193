"""Run inside the PyTorch environment: train the peer's reference Net with the study protocol.

Invoked by `tools.peer_protocol_check`; reads the split from an .npz and prints one
JSON line per epoch and a final JSON summary. Uses the peer's own `Net` and `augment`.
"""

import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--peer-dir", required=True)
    p.add_argument("--split", required=True)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    sys.path.insert(0, a.peer_dir)
    from torch_reference import Net, augment  # noqa: E402

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    d = np.load(a.split)
    x_train = torch.from_numpy(d["x_train"]).permute(0, 3, 1, 2).contiguous()
    y_train = torch.from_numpy(d["y_train"]).long()

    def floats(key):
        return torch.from_numpy(d[key]).permute(0, 3, 1, 2).float().div(255.0)

    x_val, y_val = floats("x_val"), torch.from_numpy(d["y_val"]).long()
    x_eval, y_eval = floats("x_eval"), torch.from_numpy(d["y_eval"]).long()
    model, n, b = Net(), len(y_train), a.batch_size
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.epochs * math.ceil(n / b))

    def accuracy(x, y):
        model.eval()
        with torch.inference_mode():
            return int((model(x).argmax(1) == y).sum())

    best, history = (-1, None, None), []
    for epoch in range(a.epochs):
        started = time.perf_counter()
        model.train()
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, b):
            idx = perm[i : i + b]
            x = x_train[idx].float().div(255.0) if a.no_augment else augment(x_train[idx], gen)
            loss = F.cross_entropy(model(x), y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        val_correct, eval_correct = accuracy(x_val, y_val), accuracy(x_eval, y_eval)
        record = {
            "epoch": epoch + 1,
            "val_correct": val_correct,
            "val_total": len(y_val),
            "eval_correct": eval_correct,
            "eval_total": len(y_eval),
            "seconds": time.perf_counter() - started,
        }
        history.append(record)
        print(json.dumps(record), flush=True)
        if val_correct > best[0]:
            best = (val_correct, epoch + 1, eval_correct)
    print(
        json.dumps(
            {
                "summary": True,
                "torch": torch.__version__,
                "history": history,
                "best_val_correct": best[0],
                "best_epoch": best[1],
                "eval_correct_at_best": best[2],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
