"""The models of the CIFAR-10 robustness study: how each is trained, on how much data, and
why it is there."""

import dataclasses

TRAIN_SPLIT_SIZE = 50000
"""Images in CIFAR-10's official training split."""


def check_positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be an integer >= 1")


def check_fraction(name: str, value, *, high_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not (0 <= value < 1 if high_open else 0 <= value <= 1):
        raise ValueError(f"{name}={value!r} must be in [0, 1{')' if high_open else ']'}")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model of the study: how it is trained and on how much data."""

    name: str
    mode: str  # a training mode of advjax_train: standard, fgsm, fgsm_rs, pgd, trades
    train_size: int
    epochs: int
    label: str
    seed: int | None = None  # None: the study's seed
    robust_selection: bool = False  # train with the sentinel, select by validation PGD
    full_split: bool = False  # draw from the whole training split minus validation
    dropout_rate: float | None = None  # None: the study's
    augment_pad: int | None = None  # random-crop padding; None: 4 (0: flip only)
    init_from: "ModelSpec | None" = None  # fine-tune: start from this model's trained weights
    learning_rate: float | None = None  # None: the study's
    adv_steps: int | None = None  # None: the mode's default (advjax_train.ADV_DEFAULTS)
    activation: str | None = None  # None: ReLU (advjax_train.ACTIVATIONS)
    width: int | None = None  # None: the study's CNN (1); 2 doubles every layer's channels
    ema_decay: float | None = None  # None: no weight averaging (advjax_train.TrainConfig)
    weight_decay: float | None = None  # None: the study's (AdamW's decoupled decay)
    batch_size: int | None = None  # None: the study's

    def __post_init__(self):
        where = f"models.{self.name}"
        check_positive(f"{where}.train_size", self.train_size)
        check_positive(f"{where}.epochs", self.epochs)
        if self.dropout_rate is not None:
            check_fraction(f"{where}.dropout_rate", self.dropout_rate, high_open=True)
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"{where}.learning_rate={self.learning_rate!r} must be > 0")
        if self.adv_steps is not None:
            check_positive(f"{where}.adv_steps", self.adv_steps)
        if self.augment_pad is not None and (
            not isinstance(self.augment_pad, int) or self.augment_pad < 0
        ):
            raise ValueError(f"{where}.augment_pad={self.augment_pad!r} must be an integer >= 0")
        if self.width is not None:
            check_positive(f"{where}.width", self.width)
        if self.ema_decay is not None and not 0 < self.ema_decay < 1:
            raise ValueError(f"{where}.ema_decay={self.ema_decay!r} must be in (0, 1)")
        if self.weight_decay is not None and not self.weight_decay >= 0:
            raise ValueError(f"{where}.weight_decay={self.weight_decay!r} must be >= 0")
        if self.batch_size is not None:
            check_positive(f"{where}.batch_size", self.batch_size)

    def to_dict(self) -> dict:
        """Fields for hashing; the optional ones only when set (keeps older digests valid)."""
        d = dataclasses.asdict(self)
        for optional in (
            "seed",
            "dropout_rate",
            "augment_pad",
            "init_from",
            "learning_rate",
            "adv_steps",
            "activation",
            "width",
            "ema_decay",
            "weight_decay",
            "batch_size",
        ):
            if d[optional] is None:
                d.pop(optional)
        if self.init_from is not None:
            d["init_from"] = self.init_from.to_dict()
        for flag in ("robust_selection", "full_split"):
            if not d[flag]:
                d.pop(flag)
        return d


STANDARD = ModelSpec("standard", "standard", 15000, 12, "Standard CNN")
STANDARD_FLIP = ModelSpec(
    "standard_flip",
    "standard",
    15000,
    12,
    "Standard CNN, flip only (crop without padding)",
    augment_pad=0,
)
"""The standard CNN with the random crop made the identity (no padding), as a torchvision
`RandomCrop(32)` without `padding=` is on 32x32 images: the reference's 75.5 % clean accuracy is
not reached with crop + flip in either framework (68-70 %), but is within two points with flip
only or no augmentation (73-74 %)."""
FGSM_REFERENCE = ModelSpec(
    "fgsm_reference", "fgsm", 8000, 5, "FGSM-AT, reference budget (8k, 5 ep)"
)
FGSM_MATCHED = ModelSpec("fgsm_matched", "fgsm", 15000, 12, "FGSM-AT, matched budget (15k, 12 ep)")
FGSM_RS_MATCHED = ModelSpec(
    "fgsm_rs_matched",
    "fgsm_rs",
    15000,
    12,
    "FGSM-RS-AT, matched budget (15k, 12 ep, PGD-selected)",
    robust_selection=True,
)
"""FGSM with random start (Wong et al. 2020), adversarial examples only, step 1.25 eps, with
the catastrophic-overfitting sentinel; checkpoint chosen by validation PGD-10 accuracy."""
FGSM_RS_FULL = ModelSpec(
    "fgsm_rs_full",
    "fgsm_rs",
    47000,
    15,
    "FGSM-RS-AT, full split (47k, 15 ep, PGD-selected)",
    robust_selection=True,
    full_split=True,
)
"""The better defense of the study: FGSM-RS on all 50,000 training images but the 3,000 of
validation, with the sentinel and selection by validation PGD-10."""
FGSM_RS_FULL_NODROP = ModelSpec(
    "fgsm_rs_full_nodrop",
    "fgsm_rs",
    47000,
    20,
    "FGSM-RS-AT, full split, no dropout (47k, 20 ep, PGD-selected)",
    robust_selection=True,
    full_split=True,
    dropout_rate=0.0,
)
"""FGSM-RS full split without dropout: with dropout 0.5 the 403k-parameter CNN underfits the
adversarial training set (train adversarial accuracy 32 %, loss 1.79 after 15 epochs)."""
PGD_FINETUNE_NODROP = ModelSpec(
    "pgd_finetune_nodrop",
    "pgd",
    47000,
    10,
    "PGD-5-AT fine-tune of FGSM-RS no-dropout (47k, 10 ep, PGD-selected)",
    robust_selection=True,
    full_split=True,
    dropout_rate=0.0,
    init_from=FGSM_RS_FULL_NODROP,
    learning_rate=5e-4,
    adv_steps=5,
)
"""PGD adversarial training (Madry et al. 2018; 5 steps of eps/4 from a random start)
started from the FGSM-RS no-dropout model's weights, at half the learning rate: FGSM-RS
leaves a gap between PGD-20 and the targeted DLR attack (APGD-T) that multi-step training
closes, and training PGD-AT from scratch learned too slowly on 2 cores."""
TRADES_FINETUNE_NODROP = dataclasses.replace(
    PGD_FINETUNE_NODROP,
    name="trades_finetune_nodrop",
    mode="trades",
    label="TRADES-5 fine-tune of the PGD-AT model (47k, 10 ep, PGD-selected)",
    init_from=PGD_FINETUNE_NODROP,
)
"""TRADES (Zhang et al. 2019; beta 6, a 5-step KL attack of eps/4 steps) continued from the
PGD-AT fine-tune, with its parent's data, epochs, learning rate and attack steps: the PGD-AT
models lose 4-7 points between PGD-20 and the ensemble, mostly
to the targeted DLR attack, and TRADES' KL term smooths the whole output distribution rather
than the true-class loss alone. It also trains 10 epochs more than its parent:
`PGD_CONTINUE_NODROP` is its control."""
PGD_CONTINUE_NODROP = dataclasses.replace(
    TRADES_FINETUNE_NODROP,
    name="pgd_continue_nodrop",
    mode="pgd",
    label="PGD-5-AT, 10 more epochs of the PGD-AT model (47k, 10 ep, PGD-selected)",
)
"""The TRADES fine-tune's control: derived from it, so everything but the loss (PGD-AT's)
is the same by construction, and a difference between the two is the loss, not the extra
epochs."""
PGD_CONTINUE_SILU = dataclasses.replace(
    PGD_CONTINUE_NODROP,
    name="pgd_continue_silu",
    label="PGD-5-AT, 10 more epochs of the PGD-AT model with SiLU (47k, 10 ep, PGD-selected)",
    activation="silu",
)
"""`PGD_CONTINUE_NODROP` with SiLU in place of ReLU (same parameters, same parent weights,
data, epochs, learning rate and attack): the ReLU models stop fitting their adversarial
training set at about 40 %, and a smooth activation gives the inner attack and the weight
update better gradients (smooth adversarial training, Xie et al. 2020). Its control is
`PGD_CONTINUE_NODROP`, so a difference between the two is the activation."""
PGD_CONTINUE2_SILU = dataclasses.replace(
    PGD_CONTINUE_SILU,
    name="pgd_continue2_silu",
    label="PGD-5-AT with SiLU, 10 more epochs of the SiLU model (47k, 10 ep, PGD-selected)",
    init_from=PGD_CONTINUE_SILU,
)
"""`PGD_CONTINUE_SILU` trained 10 epochs more, the same way: with SiLU the validation PGD-10
accuracy rose through the whole run (33.9 % to 37.1 %), where ReLU's had stopped at 34.6 %."""
SURROGATE = ModelSpec(
    "surrogate", "standard", 15000, 12, "Transfer surrogate (standard CNN, seed 4242)", seed=4242
)
"""A separately trained model (other seed: other init and batch order) whose PGD inputs are
transferred to every studied model: a transfer attack stronger than white-box PGD means
masked gradients."""


RESEARCH_MODELS = (
    STANDARD_FLIP,
    FGSM_RS_MATCHED,
    FGSM_RS_FULL,
    FGSM_RS_FULL_NODROP,
    PGD_FINETUNE_NODROP,
    TRADES_FINETUNE_NODROP,
    PGD_CONTINUE_NODROP,
    PGD_CONTINUE_SILU,
    PGD_CONTINUE2_SILU,
)
"""The models beyond the reference study: augmentation control, FGSM-RS, PGD-AT, TRADES and
SiLU fine-tunes. The `research` profile trains, attacks and reports them in their own folder."""


PGD_SILU_SCRATCH = ModelSpec(
    "pgd_silu_scratch",
    "pgd",
    47000,
    40,
    "PGD-5-AT with SiLU from scratch (47k, 40 ep, PGD-selected)",
    robust_selection=True,
    full_split=True,
    dropout_rate=0.0,
    adv_steps=5,
    activation="silu",
)
"""One from-scratch recipe instead of `PGD_CONTINUE2_SILU`'s four stacked stages (FGSM-RS,
PGD-AT, two SiLU PGD-AT fine-tunes: 50 epochs in all): PGD-5-AT with SiLU, no dropout, one
cosine schedule over 40 epochs on the full split."""
PGD_SILU_SCRATCH_EMA = dataclasses.replace(
    PGD_SILU_SCRATCH,
    name="pgd_silu_scratch_ema",
    label="PGD-5-AT with SiLU from scratch, weight average (47k, 40 ep, PGD-selected)",
    ema_decay=0.999,
)
"""`PGD_SILU_SCRATCH` evaluated with an exponential moving average of its weights (decay
0.999 per step, about 3 epochs; batch statistics recomputed), as in Gowal et al. 2020; the
same training, so a difference is the averaging."""
PGD_SILU_SCRATCH_WIDE = dataclasses.replace(
    PGD_SILU_SCRATCH_EMA,
    name="pgd_silu_scratch_wide",
    label="Diagnostic: the EMA recipe with every width doubled (1.6M parameters, not the study's)",
    width=2,
)
"""The capacity diagnostic: if the same recipe fits and generalises clearly better with
every layer twice as wide, the 403k CNN's limit is its capacity."""
CAPACITY_SHORT = dataclasses.replace(
    PGD_SILU_SCRATCH,
    name="capacity_short",
    train_size=10000,
    epochs=5,
    label="Capacity check: PGD-5-AT with SiLU, 10k images, 5 ep, the study's width",
)
"""The capacity diagnostic at a budget 2 CPU cores afford (a fifth of the data, an eighth of
the epochs of `PGD_SILU_SCRATCH`): paired with `CAPACITY_SHORT_WIDE`, it shows whether
doubling every width fits the adversarial training examples and generalises better at the
same data and steps."""
CAPACITY_SHORT_WIDE = dataclasses.replace(
    CAPACITY_SHORT,
    name="capacity_short_wide",
    label="Capacity check: PGD-5-AT with SiLU, 10k images, 5 ep, every width doubled (1.6M)",
    width=2,
)
"""`CAPACITY_SHORT` with every layer twice as wide (1.6M parameters, not the study's model)."""
SHORT_NO_DECAY = dataclasses.replace(
    CAPACITY_SHORT,
    name="short_no_decay",
    label="Less regularisation: the short recipe without weight decay",
    weight_decay=0.0,
)
"""`CAPACITY_SHORT` without AdamW's decoupled weight decay (5e-4 times the learning rate per
step: at most 0.7 % shrinkage over the 40-epoch schedule, so it is expected to matter little)."""
SHORT_FLIP_ONLY = dataclasses.replace(
    CAPACITY_SHORT,
    name="short_flip_only",
    label="Less regularisation: the short recipe with flips only (no random crop)",
    augment_pad=0,
)
"""`CAPACITY_SHORT` with weaker augmentation: the random crop made the identity, flips kept."""
SHORT_BATCH64 = dataclasses.replace(
    CAPACITY_SHORT,
    name="short_batch64",
    label="Less regularisation: the short recipe at batch size 64 (twice the steps)",
    batch_size=64,
)
"""`CAPACITY_SHORT` at half the batch size: twice the updates over the same images."""
SHORT_LR2X = dataclasses.replace(
    CAPACITY_SHORT,
    name="short_lr2x",
    label="Less regularisation: the short recipe at twice the learning rate (2e-3)",
    learning_rate=2e-3,
)
"""`CAPACITY_SHORT` at twice the peak learning rate of its cosine schedule."""
REGULARISATION_PROBES = (SHORT_NO_DECAY, SHORT_FLIP_ONLY, SHORT_BATCH64, SHORT_LR2X)
"""One change at a time away from `CAPACITY_SHORT` towards less regularisation, each
trained at its budget (10k images, 5 epochs) and compared with it on the same validation
images: the fit check says the full recipe underfits, and these say which lever moves it."""
PGD_SILU_SCRATCH_FLIP_EMA = dataclasses.replace(
    PGD_SILU_SCRATCH_EMA,
    name="pgd_silu_scratch_flip_ema",
    label="PGD-5-AT with SiLU from scratch, flips only, weight average (47k, 40 ep)",
    augment_pad=0,
)
"""`PGD_SILU_SCRATCH_EMA` without the random crop: the probe that moved validation PGD-10
most (`SHORT_FLIP_ONLY`, +3.0 points at 10k images x 5 epochs), at the full length."""
PGD_SILU_SCRATCH_FLIP = dataclasses.replace(
    PGD_SILU_SCRATCH,
    name="pgd_silu_scratch_flip",
    label="PGD-5-AT with SiLU from scratch, flips only (47k, 40 ep, PGD-selected)",
    augment_pad=0,
)
"""The live weights of `PGD_SILU_SCRATCH_FLIP_EMA`'s training; paired with `PGD_SILU_SCRATCH`."""
PGD_SILU_SCRATCH_BATCH64_EMA = dataclasses.replace(
    PGD_SILU_SCRATCH_EMA,
    name="pgd_silu_scratch_batch64_ema",
    label="PGD-5-AT with SiLU from scratch, batch 64, weight average (47k, 40 ep)",
    batch_size=64,
)
"""`PGD_SILU_SCRATCH_EMA` at batch size 64, the second lever of the probes (`SHORT_BATCH64`,
+1.5 points), at the full length."""
PGD_SILU_SCRATCH_BATCH64 = dataclasses.replace(
    PGD_SILU_SCRATCH,
    name="pgd_silu_scratch_batch64",
    label="PGD-5-AT with SiLU from scratch, batch 64 (47k, 40 ep, PGD-selected)",
    batch_size=64,
)
"""The live weights of `PGD_SILU_SCRATCH_BATCH64_EMA`'s training."""
FULL_LENGTH_LEVERS = (
    PGD_SILU_SCRATCH_FLIP_EMA,
    PGD_SILU_SCRATCH_FLIP,
    PGD_SILU_SCRATCH_BATCH64_EMA,
    PGD_SILU_SCRATCH_BATCH64,
)
"""The two levers the regularisation probes found, each at `PGD_SILU_SCRATCH`'s full length
(one training per lever gives its averaged and its live weights); their policy,
`full_length_levers_policy.json`, was declared before they were trained."""
ROBUST_CNN_MODELS = (
    PGD_SILU_SCRATCH,
    PGD_SILU_SCRATCH_EMA,
    PGD_SILU_SCRATCH_WIDE,
    CAPACITY_SHORT,
    CAPACITY_SHORT_WIDE,
    *REGULARISATION_PROBES,
    *FULL_LENGTH_LEVERS,
)
"""Candidates for the most robust 403k CNN; training them takes hours on 2 CPU cores and
minutes on a GPU (`--models` picks some)."""
