"""The training configuration (`model` and `train` sections of params.yaml) and the model's size.

Torch-free on purpose: the mixture stage sizes its token budget with `model_size` and must not import torch.
Every model is strict: an unknown key or a value of the wrong type is an error that names the key, so a
misspelt `-S train.optimizer.lr=...` can never leave the default silently in force.
"""

from __future__ import annotations

from typing import Annotated, Literal, Mapping, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tokenmill.section import Positive, Section, check_section


class TrainConfigError(ValueError):
    """A model or train configuration that cannot run; the message names the key."""


class _Strict(BaseModel):
    # strict: "3" is not an int and 1 is not a bool; an int is still accepted where a float is expected.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ModelConfig(_Strict):
    """A decoder-only Llama-style transformer. The vocabulary comes from the tokenizer, not from here."""

    name: str = "custom"
    n_layers: int = Field(gt=0)
    d_model: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int | None = Field(default=None, gt=0)  # grouped-query attention; None: n_heads (plain MHA)
    ffn_dim: int | None = Field(default=None, gt=0)  # SwiGLU hidden size; None: ffn_multiplier x d_model
    ffn_multiplier: float = Field(default=8 / 3, gt=0)  # Llama: 2/3 of 4d keeps the FLOPs of a 4d GELU MLP
    ffn_multiple_of: int = Field(default=256, gt=0)  # hidden size rounded up to this (matmul-friendly)
    qk_norm: bool = False  # RMSNorm on queries and keys per head (OLMo 2, Qwen 3): tames logit growth
    tie_embeddings: bool = False
    z_loss: float = Field(default=0.0, ge=0)  # weight of log(Z)^2 (PaLM: 1e-4); 0 disables it
    rope_theta: float = Field(default=10000.0, gt=0)
    norm_eps: float = Field(default=1e-5, gt=0)
    init_std: float = Field(default=0.02, gt=0)
    document_mask: bool = False  # positions and attention restart after every end-of-text token

    @model_validator(mode="after")
    def _check(self) -> "ModelConfig":
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.kv_heads})")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"head dimension d_model/n_heads = {self.d_model // self.n_heads} must be even (RoPE)")
        return self

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def hidden_dim(self) -> int:
        if self.ffn_dim:
            return self.ffn_dim
        raw = int(self.ffn_multiplier * self.d_model)
        return -(-raw // self.ffn_multiple_of) * self.ffn_multiple_of


class OptimizerConfig(_Strict):
    lr: float = Field(default=3.0e-4, gt=0)  # peak learning rate
    betas: list[float] = Field(default=[0.9, 0.95], min_length=2, max_length=2)  # a YAML list
    eps: float = Field(default=1.0e-8, gt=0)
    weight_decay: float = Field(default=0.1, ge=0)  # on matrices only; norms and embeddings are not decayed
    fused: bool | None = None  # None: fused AdamW on GPU, the for-each implementation on CPU


class ScheduleConfig(_Strict):
    """Warmup, then cosine to the floor over the run, or warmup-stable-decay (WSD).

    WSD decays linearly to the floor over the plan's `decay_phase` (the anneal phase) when the run reaches
    it, otherwise over the last `decay_fraction` of the steps.
    """

    kind: Literal["cosine", "wsd"] = "cosine"
    warmup_steps: int = Field(default=100, ge=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)  # the floor, as a fraction of the peak
    decay_phase: str | None = "anneal"
    decay_fraction: float = Field(default=0.2, gt=0, le=1)


class SpikeConfig(_Strict):
    """Skip the update of a step whose loss or gradient norm leaves its running window by k std devs."""

    enabled: bool = True
    window: int = Field(default=50, gt=1)  # accepted steps the mean and std are taken over
    min_history: int = Field(default=10, gt=1)  # no verdict before this many accepted steps
    k_sigma: float = Field(default=6.0, gt=0)
    # More skips in a row than this: the run rolls back (train.rollback), or stops when it may not: diverged.
    max_consecutive: int = Field(default=20, gt=0)


class RollbackConfig(_Strict):
    """Roll back a loss excursion that does not come back (tokenmill.train.rollback): the run returns to the
    newest checkpoint at or before the excursion's first step, skips the batches that led into it, lowers the
    learning rate and goes on; at most max_rollbacks times, then it stops."""

    enabled: bool = True
    # A step whose loss is above mean + k_sigma x std of the recent losses of its plan phase (the spike guard's
    # window and min_history, the same std floor of 1% of the mean) opens an excursion; the band is frozen there.
    k_sigma: float = Field(default=3.0, gt=0)
    window: int = Field(default=50, gt=1)  # an excursion with every step above its band this long: roll back
    lr_factor: float = Field(default=0.5, gt=0, le=1)  # the learning rate is multiplied by it at each rollback
    # Batches skipped after a rollback: those of the excursion's first step and of the steps before it, this
    # many in all (never before the checkpoint returned to); their documents are recorded, not trained on later.
    skip_batches: int = Field(default=10, gt=0)
    max_rollbacks: int = Field(default=3, ge=0)  # one unrecovered excursion more stops the run


# The embedding's sigma1/sigma2: 1.01 for a freshly initialised 8192 x 128 table, 4.16 for the demo's trained
# one (a common direction grows as training goes, the known anisotropy of token embeddings); a table whose rows
# fall onto one direction goes to tens and beyond (tests/test_health.py). Past 20 is an alarm, not a stop.
SIGMA_RATIO_MAX = 20.0


class HealthConfig(_Strict):
    """Per-layer health (tokenmill.train.health): group gradient norms and update ratios at the logging interval,
    the embedding's sigma1/sigma2 every svd_interval steps, and the two alarms."""

    enabled: bool = True
    svd_interval: int = Field(default=100, gt=0)  # steps between measurements of the embedding's sigma1/sigma2
    sigma_ratio_max: float = Field(default=SIGMA_RATIO_MAX, gt=1)  # past it: the embedding_collapse alarm
    drift_horizon: int = Field(default=500, gt=0)  # steps a group's gradient-norm growth is judged over
    drift_factor: float = Field(default=2.0, gt=1)  # growth over the horizon past it: the grad_norm_drift alarm
    # Steps between comparisons of the data-parallel replicas' parameters (checksums of their shards), and
    # always before a checkpoint is written; a mismatch stops the attempt (silent data corruption). Only
    # layouts with replicas (train.parallel.dp_replicate > 1) have anything to compare.
    replica_check_interval: int = Field(default=100, gt=0)


class CheckpointConfig(_Strict):
    interval: int = Field(default=100, gt=0)  # steps between checkpoints (and always the last step)
    keep: int = Field(default=2, gt=0)  # newest complete checkpoints kept
    # Written in the background while the next steps run (a synchronous save of the 0.86B preset blocked
    # training 23-26 s on one H100); auto: on GPU. The copy to host memory costs the state's size there.
    asynchronous: bool | Literal["auto"] = "auto"
    # The checkpoint at the step where WSD's decay begins (the last of the stable phase) is also written and kept
    # after the run: an anneal branches from it (tokenmill.anneal, the anneal@<name> stages). One checkpoint more:
    # 22 MB on the demo; a cosine schedule has no stable phase and keeps none.
    keep_decay_start: bool = True


class LoggingConfig(_Strict):
    log_interval: int = Field(default=10, gt=0)  # steps between DVCLive records of the training metrics
    eval_interval: int = Field(default=100, gt=0)  # steps between held-out evaluations (and the last step)
    eval_sequences: int = Field(default=16, ge=0)  # held-out sequences per bucket (0: no held-out loss)
    # The run's noise: evaluations at the last step and noise_points - 1 more, noise_stride steps apart
    # before it; the spread of their scores ("checkpoint noise", Signal and Noise 2025) is each metric's σ.
    noise_points: int = Field(default=3, ge=1)
    noise_stride: int = Field(default=5, gt=0)
    peak_flops: float | None = Field(default=None, gt=0)  # per device, for MFU; None: the table in metrics.py


class ParallelConfig(_Strict):
    """Mesh dp_replicate x dp_shard x tp. dp_shard -1: whatever the world size leaves after the others."""

    dp_replicate: int = Field(default=1, gt=0)
    dp_shard: int = -1
    tp: int = Field(default=1, gt=0)
    activation_checkpoint: Literal["none", "selective", "full"] = "none"
    compile: bool = False  # torch.compile each block
    param_dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bfloat16 on GPU, float32 on CPU
    reduce_dtype: Literal["float32", "bfloat16"] = "float32"
    # torchao's float8 training for the blocks' linears (tensorwise or rowwise scaling; the output layer stays
    # in param_dtype): parallel.apply_float8. "none" until a measurement on the preset's GPU says it pays.
    float8: Literal["none", "tensorwise", "rowwise"] = "none"


class RopeScalingConfig(_Strict):
    """RoPE's base in a phase whose sequences are longer than train.seq_len (mixture.phases.<name>.seq_len).

    none: the model's rope_theta throughout (the long phase extrapolates positions it has not seen).
    base: a plain change of base to `theta` (Llama 3: 500K for its long-context stages; Qwen3: 10K -> 1M).
    ntk: NTK-aware scaling, rope_theta x s^(d/(d-2)) with s the phase's length over train.seq_len and d the head
    dimension: the lowest frequency stretched by s, the highest kept (bloc97's rule, as Code Llama's base change).
    The base is a pure function of the step's phase, so a resumed run sets it as the uninterrupted one did; the
    final phase's base is what the export writes (rope_theta of config.json)."""

    kind: Literal["none", "base", "ntk"] = "none"
    theta: float | None = Field(default=None, gt=0)  # kind base: the new base

    @model_validator(mode="after")
    def _theta_for_base(self) -> "RopeScalingConfig":
        if self.kind == "base" and self.theta is None:
            raise ValueError("train.rope_scaling.theta: kind base needs the new base (e.g. 500000.0)")
        if self.kind != "base" and self.theta is not None:
            raise ValueError(f"train.rope_scaling.theta: only kind base takes a theta, kind is {self.kind}")
        return self

    def theta_at(self, model: "ModelConfig", seq_len: int, base_seq_len: int) -> float:
        """RoPE's base for sequences of seq_len in a run whose train.seq_len is base_seq_len."""
        if seq_len <= base_seq_len or self.kind == "none":
            return model.rope_theta
        if self.kind == "base":
            return float(self.theta)
        d = model.head_dim
        return model.rope_theta * (seq_len / base_seq_len) ** (d / (d - 2))


class LaunchConfig(_Strict):
    """How the stage launches the run with torchrun; train() itself takes whatever world it is started in."""

    nnodes: int = Field(default=1, gt=0)
    nproc_per_node: int = Field(default=1, gt=0)
    # A failed, killed or hung rank ends its attempt; torchrun starts all ranks again this many times, each
    # attempt resuming from the newest complete checkpoint (tokenmill.train.faults).
    max_restarts: int = Field(default=0, ge=0)
    # How long a collective may wait for a peer before it fails (the process group's timeout; NCCL's and
    # gloo's defaults are 10 and 30 minutes), and how long a rank may show no progress (no step, evaluation or
    # checkpoint finished) before its watchdog ends it, naming the rank and the step (None: no watchdog).
    collective_timeout_seconds: float = Field(default=600.0, gt=0)
    watchdog_seconds: float | None = Field(default=1800.0, gt=0)


class TrainConfig(_Strict):
    seq_len: int = Field(gt=0)
    global_batch: int = Field(gt=0)  # sequences per optimizer step, over all data-parallel ranks
    micro_batch: int | None = Field(default=None, gt=0)  # sequences per rank per forward; None: all at once
    token_budget: int | None = Field(default=None, gt=0)  # None: tokens_per_param x parameters
    tokens_per_param: float = Field(default=20.0, gt=0)
    max_steps: int | None = Field(default=None, gt=0)  # cap below the budget's steps (smoke runs)
    seed: int = 0  # model initialisation
    # An integer: step N trains on window π(N) of the plan's stream, π the run's own windows shuffled within
    # each plan phase with this seed (seed replicas of a scout add their replica number). None: window N,
    # the plan's order, where consecutive steps read consecutive slices of the same long documents: on the
    # e2e build the full run's held-out loss was 0.3 nats worse than with any shuffled order (RESULTS,
    # "Compare").
    data_seed: int | None = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # μP (tokenmill.train.model.Transformer): the d_model at which this recipe's learning rate and init_std were
    # tuned; every run of it (scouts and full run) then scales its initialisation, logits, attention and hidden
    # learning rates by d_model / mup_base_width, so an LR found by the smallest scout holds for the full run.
    # None: the standard parametrisation.
    mup_base_width: int | None = Field(default=None, gt=0)
    clip_grad_norm: float = Field(default=1.0, gt=0)
    optimizer: OptimizerConfig = OptimizerConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    spike: SpikeConfig = SpikeConfig()
    rollback: RollbackConfig = RollbackConfig()
    health: HealthConfig = HealthConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    parallel: ParallelConfig = ParallelConfig()
    launch: LaunchConfig = LaunchConfig()
    rope_scaling: RopeScalingConfig = RopeScalingConfig()

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch

    def width_mult(self, model: ModelConfig) -> float | None:
        """μP's width multiplier of a model under this recipe; None: the standard parametrisation."""
        return None if self.mup_base_width is None else model.d_model / self.mup_base_width


class RunConfig(_Strict):
    model: ModelConfig
    train: TrainConfig

    @model_validator(mode="after")
    def _check(self) -> "RunConfig":
        tp = self.train.parallel.tp
        if tp > 1:
            m = self.model
            if m.n_heads % tp or m.kv_heads % tp:
                raise ValueError(f"train.parallel.tp ({tp}) must divide model.n_heads ({m.n_heads}) "
                                 f"and model.n_kv_heads ({m.kv_heads})")
            if m.hidden_dim % tp:
                raise ValueError(f"train.parallel.tp ({tp}) must divide the FFN size ({m.hidden_dim})")
            if self.train.seq_len % tp:
                # Sequence parallel splits the sequence over TP ranks; gloo crashes on uneven splits.
                raise ValueError(f"train.parallel.tp ({tp}) must divide train.seq_len ({self.train.seq_len})")
            if m.tie_embeddings:
                raise ValueError("model.tie_embeddings is not supported with train.parallel.tp > 1 "
                                 "(the embedding and the output layer are sharded on different dimensions)")
        return self


class MeshShape(NamedTuple):
    """How a world of processes splits into dp_replicate x dp_shard x tp, and each step's sequences over it."""

    dp_replicate: int
    dp_shard: int
    tp: int
    per_rank: int  # sequences of each global batch per data-parallel rank
    micro_batch: int  # sequences per forward pass

    @property
    def dp_size(self) -> int:
        return self.dp_replicate * self.dp_shard


def mesh_shape(train: TrainConfig, world: int) -> MeshShape:
    """The layout of `world` processes, or one line naming the keys that do not fit it.

    The one statement of these rules: the training stage checks its launch (nnodes x nproc_per_node) with it
    before torchrun starts any process, and every rank builds its DeviceMesh and batch slices from it.
    """
    par = train.parallel
    shard = par.dp_shard if par.dp_shard != -1 else world // (par.dp_replicate * par.tp)
    if shard < 1 or par.dp_replicate * shard * par.tp != world:
        raise TrainConfigError(f"train.parallel: dp_replicate {par.dp_replicate} x dp_shard {par.dp_shard} x tp "
                               f"{par.tp} does not fill {world} processes")
    dp = par.dp_replicate * shard
    if train.global_batch % dp:
        raise TrainConfigError(f"train.global_batch ({train.global_batch}) must be divisible by the data-parallel "
                               f"size ({dp} = dp_replicate {par.dp_replicate} x dp_shard {shard})")
    per_rank = train.global_batch // dp
    micro = train.micro_batch or per_rank
    if per_rank % micro:
        raise TrainConfigError(f"train.micro_batch ({micro}) must divide the sequences per data-parallel rank "
                               f"({per_rank} = global_batch {train.global_batch} / {dp} ranks)")
    return MeshShape(par.dp_replicate, shard, par.tp, per_rank, micro)


def _validate(cls, data: Mapping, section: str):
    lines = check_section(section, data, cls)
    if lines:
        raise TrainConfigError("; ".join(lines))
    return cls.model_validate(dict(data))


def parse_model(model_cfg: Mapping) -> ModelConfig:
    return _validate(ModelConfig, model_cfg, "model")


def parse_train(train_cfg: Mapping) -> TrainConfig:
    return _validate(TrainConfig, train_cfg, "train")


# What a scout takes of the full run's recipe (the train section): everything but its seeds. A rung is seeded by
# the ladder (scouts.<rung>.seed), so a seed study of the full run (`-S train.seed=1 -S train.data_seed=1`)
# trains the full run again and not the ladder, whose seed noise its own replicas measure (on the e2e demo the
# seed-only experiment took 75 s, 30 of them retraining the scouts). dvc.yaml declares these keys as the
# scout stages' params; the dependency test (tests/test_pipeline_e2e.py) checks the two lists agree.
SCOUT_RECIPE = tuple(k for k in TrainConfig.model_fields if k not in ("seed", "data_seed"))


class Scout(Section):
    """A rung of the scout ladder (params.yaml `scouts.<rung>`): its model, its token budget (null:
    train.tokens_per_param x parameters), its seed replicas and their seed, its micro-batch and its learning-rate
    sweep (parse_run checks the model and the rung's run)."""

    model: dict
    token_budget: Positive | None
    seeds: Positive = 1
    seed: int = 0  # the rung's runs: replica k initialises and orders its windows with seed + k (not train.seed)
    micro_batch: Positive | None = None
    lrs: list[Annotated[float, Field(gt=0)]] = []  # one more run per peak learning rate (tokenmill.train.stage.lr_sweep)


def scout_run_config(scout: Mapping, train_cfg: Mapping) -> dict:
    """A rung of the scout ladder ({model: {...}, token_budget: N[, seeds: K][, seed: S][, micro_batch: M]}) with
    the full run's recipe (train, its seeds left out).

    token_budget null trains it, like the full run, on train.tokens_per_param x its own parameters.
    seed (default 0) initialises the rung's run and draws the order of its windows (always shuffled: the plan's
    order, train.data_seed null, is a study of the full run; RESULTS, "Compare").
    micro_batch replaces the full run's: a small model is overhead-bound and wants larger micro-batches
    (measured on one H100: RESULTS.md, "Training on one H100: findings (2026-11-25)")."""
    keys = {"model", "token_budget", "seeds", "seed", "micro_batch", "lrs"}
    if not isinstance(scout, Mapping) or not {"model", "token_budget"} <= set(scout) <= keys:
        got = sorted(scout) if isinstance(scout, Mapping) else type(scout).__name__
        raise TrainConfigError(f"a scout needs the keys model and token_budget (and optionally seeds, seed, "
                               f"micro_batch, lrs), got {got}")
    budget = scout["token_budget"]
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)):
        raise TrainConfigError(f"scouts.*.token_budget: expected an integer or null, got {budget!r}")
    seed = scout.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TrainConfigError(f"scouts.*.seed: expected an integer, got {seed!r}")
    train = {**{k: v for k, v in train_cfg.items() if k in SCOUT_RECIPE}, "token_budget": budget,
             "seed": seed, "data_seed": seed}
    if "micro_batch" in scout:
        micro = scout["micro_batch"]
        if micro is not None and (not isinstance(micro, int) or isinstance(micro, bool) or micro < 1):
            raise TrainConfigError(f"scouts.*.micro_batch: expected a positive integer or null, got {micro!r}")
        train["micro_batch"] = micro
    return {"model": dict(scout["model"]), "train": train}


def parse_run(run_cfg: Mapping) -> RunConfig:
    """{"model": {...}, "train": {...}} -> RunConfig; errors name the key (model.n_heads, train.optimizer.lr)."""
    if not isinstance(run_cfg, Mapping) or set(run_cfg) != {"model", "train"}:
        got = sorted(run_cfg) if isinstance(run_cfg, Mapping) else type(run_cfg).__name__
        raise TrainConfigError(f"a run configuration needs exactly the sections model and train, got {got}")
    model, train = parse_model(run_cfg["model"]), parse_train(run_cfg["train"])
    try:
        return RunConfig(model=model, train=train)
    except ValidationError as exc:
        raise TrainConfigError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())) from None


def token_budget(budget: int | None, tokens_per_param: float, params: int) -> int:
    """A run's token budget: train.token_budget when set, otherwise train.tokens_per_param x its parameters (the
    Chinchilla rule; the ratio is the configuration's, conf/train). The one statement of the rule: the mixture
    plans with it, the trainer and the forecast count steps with it (run_steps)."""
    return int(budget) if budget else int(tokens_per_param * params)


def run_steps(train: TrainConfig, params: int, plan_tokens: int) -> int:
    """Steps a run takes: its token budget in steps (a scout's is smaller than the plan), no more than the plan
    holds ((plan tokens - 1) // T: the last target needs one token past the step), capped by max_steps."""
    per_step = train.tokens_per_step
    steps = min(token_budget(train.token_budget, train.tokens_per_param, params) // per_step,
                max(0, (plan_tokens - 1) // per_step))
    return min(steps, train.max_steps) if train.max_steps else steps


def model_size(model_cfg: Mapping | ModelConfig, vocab_size: int, seq_len: int | None = None) -> dict:
    """Parameter counts and training FLOPs per token of the model tokenmill.train.model builds.

    matmul_params: weights that multiply activations (attention and FFN projections, the output layer, which
    is a matmul even when tied); embedding_params: the input embedding table (a lookup, no FLOPs).
    flops_per_token = 6 x matmul_params + 12 x n_layers x d_model x seq_len, the attention scores and
    weighted values (forward 2 x 2 x L x d x seq, backward twice that), counting the full seq x seq square;
    flops_per_token_causal halves the attention term (only the lower triangle is needed).
    seq_len defaults to 0 when not given (no attention term): callers that report FLOPs pass it.
    """
    m = model_cfg if isinstance(model_cfg, ModelConfig) else parse_model(model_cfg)
    d, hd, L = m.d_model, m.head_dim, m.n_layers
    attn = d * m.n_heads * hd + 2 * d * m.kv_heads * hd + m.n_heads * hd * d  # q, k, v, o
    ffn = 3 * d * m.hidden_dim  # gate, up, down
    norms = 2 * d + (2 * hd if m.qk_norm else 0)  # attention and FFN RMSNorm weights (+ q and k norms)
    output = vocab_size * d
    embedding = vocab_size * d
    matmul = L * (attn + ffn) + output
    params = L * (attn + ffn + norms) + d + embedding + (0 if m.tie_embeddings else output)
    s = int(seq_len or 0)
    attention_flops = 12 * L * d * s
    return {
        "params": params,
        "matmul_params": matmul,
        "embedding_params": embedding,
        "non_embedding_params": params - embedding - (0 if m.tie_embeddings else output),
        "flops_per_token": 6 * matmul + attention_flops,
        "flops_per_token_causal": 6 * matmul + attention_flops // 2,
        "seq_len": s,
    }
