"""The original AutoAttack (Croce & Hein's code, packaged as `pyautoattack`), run inside the
PyTorch environment by `benchmarks.any_model_autoattack`: the standard version on the peer's
`Net` with the weights advjax exported, timed member by member from its own log.

Reads the .npz that `benchmarks.autoattack_peer.run_torch_script` writes and writes one JSON:
per-case robust flags, per-member robust accuracy and seconds, the model passes it made
(forward and backward rows through the network, counted by a wrapper), the largest logit
difference to advjax, peak memory.
"""

import argparse
import json
import logging
import re
import sys
import time

import numpy as np
import torch


class _Members(logging.Handler):
    """Collects the original's 'robust accuracy after X: r% (total time t s)' lines."""

    PATTERN = re.compile(r"robust accuracy after (\S+): ([\d.]+)% \(total time ([\d.]+) s\)")

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.rows = []

    def emit(self, record):
        match = self.PATTERN.search(record.getMessage())
        if match:
            name, accuracy, total = match.groups()
            self.rows.append((name.lower(), float(accuracy) / 100, float(total)))


class _CountBackward(torch.autograd.Function):
    """Identity whose backward adds the batch's rows to `counter.backward`."""

    @staticmethod
    def forward(ctx, out, counter):
        ctx.counter = counter
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        ctx.counter.backward += grad.shape[0]
        return grad, None


class Counted(torch.nn.Module):
    """The network, counting the rows of every forward pass and of every backward pass
    through its output: model passes, the unit that compares across frameworks."""

    def __init__(self, net):
        super().__init__()
        self.net, self.forward_rows, self.backward = net, 0, 0

    def forward(self, x):
        self.forward_rows += x.shape[0]
        out = self.net(x)
        return _CountBackward.apply(out, self) if out.requires_grad else out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--peer-dir", required=True)
    p.add_argument("--inputs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from pyautoattack import AutoAttack
    from torch_autoattack import peak_rss_mib, read_inputs

    torch.set_num_threads(a.threads)
    model, x, y, extra = read_inputs(a.peer_dir, a.inputs)
    with torch.no_grad():
        logits = torch.cat([model(x[i : i + 250]) for i in range(0, len(y), 250)]).numpy()
    model = Counted(model).eval()
    members = _Members()
    logger = logging.getLogger("auto-attack")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(members)
    adversary = AutoAttack(model, norm="Linf", eps=8 / 255, version="standard", seed=a.seed)
    started = time.perf_counter()
    x_adv, _ = adversary.run_standard_evaluation(x, y, batch_size=250)
    seconds = time.perf_counter() - started
    passes = {"forward": model.forward_rows, "backward": model.backward}
    with torch.no_grad():
        adv = torch.cat([model(x_adv[i : i + 250]) for i in range(0, len(y), 250)])
    robust = (adv.argmax(1) == y) & torch.from_numpy(logits.argmax(1) == y.numpy())
    rows, previous = [], 0.0
    for name, accuracy, total in members.rows:
        rows.append({"member": name, "robust_accuracy": accuracy, "seconds": total - previous})
        previous = total
    result = {
        "torch": torch.__version__,
        "autoattack": __import__("pyautoattack").__version__,
        "seconds": seconds,
        "members": rows,
        "passes": passes,
        "robust": robust.numpy().astype(int).tolist(),
        "max_logit_difference": float(np.abs(logits - extra["logits"]).max()),
        "peak_rss_mib": peak_rss_mib(),
    }
    with open(a.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
