"""Long context (issue 46): a plan phase at its own sequence length drawn from long documents, a run that switches
length and RoPE base at that phase without a restart and resumes exactly across the switch, an export whose
logits are the model's at the long length, and the use of context measured (loss by position, the retrieval
probe) on real held-out text.

Real data: train_helpers' corpus (WikiText-2 valid articles and Tiny Shakespeare scenes), tokenized and planned by
the stages' own functions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from tokenmill import schema
from tokenmill.mixture import MixtureError, build_plan, parse_phases, phase_seq_len
from tokenmill.mixture.params import Mixture
from tokenmill.section import ParamError
from tokenmill.tokenize import INDEX
from tokenmill.train import context
from tokenmill.train.config import RopeScalingConfig, parse_model
from tokenmill.train.data import BatchLoader, PlanStream, heldout_documents, tokens_hash
from train_helpers import build_corpus, tiny_run, unigram_entropy

BASE, LONG, STEP_TOKENS = 32, 128, 32 * 8  # tiny_run: seq_len 32 x global_batch 8
BUDGET = 48_000  # tokens: 187 steps of 256
MIN_DOC = 8000  # the long phase reads only reference articles of 8,000 tokens or more (about half of them)


def _long_mixture(seq_len: int = LONG, min_doc: int = MIN_DOC) -> Mixture:
    return Mixture.resolve({"name": "long", "phases": {
        "bulk": {"fraction": 0.7, "weights": {"reference": 0.6, "books": 0.4}},
        "anneal": {"fraction": 0.2, "weights": {"reference": 0.8, "books": 0.2}},
        "long": {"fraction": 0.1, "weights": {"reference": 1.0}, "seq_len": seq_len,
                 "min_doc_tokens": {"reference": min_doc}}}})


def _index(corpus: Path) -> pa.Table:
    return pq.read_table(corpus / "tokenize" / "index" / "00000.parquet", schema=INDEX)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """train_helpers' corpus re-planned with a last phase of 128-token sequences from long articles, as the mixture
    stage writes it (plan, held-out documents, the manifest's phase lengths)."""
    root = build_corpus(tmp_path_factory.mktemp("long_corpus"), token_budget=BUDGET)
    phases = parse_phases(_long_mixture().phases)
    result = build_plan(_index(root), phases, BUDGET, 7, max_epochs=4.0, heldout_fraction=0.05)
    mix = root / "mixture"
    schema.write_parquet(result["plan"], result["plan"].schema, mix / "plan.parquet")
    (mix / "manifest.json").write_text(json.dumps({"phase_seq_len": phase_seq_len(phases, BASE, STEP_TOKENS)}))
    return root


def test_the_long_phase_is_planned_at_its_length_from_long_documents(corpus):
    plan = pq.read_table(corpus / "mixture" / "plan.parquet").to_pylist()
    long_rows = [r for r in plan if r["phase"] == "long"]
    assert long_rows and all(r["bucket"] == "reference" and r["length"] >= MIN_DOC for r in long_rows)
    # the other phases still read short documents: the filter is the phase's own
    assert any(r["length"] < MIN_DOC for r in plan if r["phase"] != "long" and r["bucket"] == "reference")
    assert json.loads((corpus / "mixture" / "manifest.json").read_text())["phase_seq_len"] == \
        {"bulk": BASE, "anneal": BASE, "long": LONG}
    # a length that does not divide a step's tokens, a minimum for a bucket the phase does not weight, a minimum
    # no document reaches: one line each, naming the key
    with pytest.raises(MixtureError, match=r"mixture.phases.long.seq_len: 96 does not divide a step's 256 tokens"):
        phase_seq_len(parse_phases(_long_mixture(96).phases), BASE, STEP_TOKENS)
    with pytest.raises(ParamError, match=r"min_doc_tokens: expected buckets this phase weights \(reference\)"):
        Mixture.resolve({"name": "x", "phases": {"all": {"fraction": 1.0, "weights": {"reference": 1.0},
                                                         "min_doc_tokens": {"books": 10}}}})
    with pytest.raises(MixtureError, match=r"phase 'long': every document of bucket 'reference' is shorter than "
                                           r"min_doc_tokens 1,000,000"):
        build_plan(_index(corpus), parse_phases(_long_mixture(min_doc=1_000_000).phases), BUDGET, 7)


def test_each_step_reads_its_phases_length_and_the_same_tokens(corpus):
    """A step keeps its T tokens in every phase: the long phase's steps are T / 128 sequences of 128, and the step's
    token range (what `tokenmill audit step` and the lineage compute as N x T) is the same arithmetic."""
    stream = PlanStream(corpus / "tokenize", corpus / "mixture")
    loader = BatchLoader(stream, BASE, 8, record=False)
    first_long = stream.phase_start("long") // STEP_TOKENS + 1  # the first window that starts in the long phase
    assert loader.seq_len(first_long - 2) == BASE and loader.seq_len(first_long) == LONG
    b = loader.batch(first_long)
    assert b.phase == "long" and b.inputs.shape == (STEP_TOKENS // LONG, LONG)
    np.testing.assert_array_equal(b.inputs.reshape(-1), stream.read(first_long * STEP_TOKENS,
                                                                    (first_long + 1) * STEP_TOKENS))
    assert loader.longest_in(first_long - 1) == BASE and loader.longest_in(first_long + 1) == LONG
    with pytest.raises(Exception, match=r"phase 'long' reads sequences of 128 tokens: a step's 256 tokens"):
        BatchLoader(stream, BASE, 8, dp_size=4, record=False)


def test_ntk_and_base_change_give_the_documented_bases():
    model = parse_model({"n_layers": 1, "d_model": 64, "n_heads": 4, "rope_theta": 10000.0})  # head_dim 16
    assert RopeScalingConfig().theta_at(model, 128, 32) == 10000.0
    assert RopeScalingConfig(kind="base", theta=5e5).theta_at(model, 128, 32) == 5e5
    assert RopeScalingConfig(kind="base", theta=5e5).theta_at(model, 32, 32) == 10000.0  # base phases keep theirs
    assert RopeScalingConfig(kind="ntk").theta_at(model, 128, 32) == pytest.approx(10000.0 * 4 ** (16 / 14))
    with pytest.raises(ValueError, match="kind base needs the new base"):
        RopeScalingConfig(kind="base")


def _run(corpus: Path, out: Path, stop_after: int | None = None, kind: str = "ntk") -> dict:
    from tokenmill.train.loop import train

    # the whole plan (long articles overshoot each phase's quota: the plan holds more than BUDGET)
    cfg = tiny_run(token_budget=10 * BUDGET, rope_scaling={"kind": kind}, checkpoint={"interval": 4, "keep": 2})
    return train(cfg, corpus, out, None, stop_after=stop_after)


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> dict:
    """The run straight through; the same run stopped one step before the switch and resumed across it; the run
    without a RoPE change."""
    root = tmp_path_factory.mktemp("long_runs")
    whole = _run(corpus, root / "whole")
    steps = whole["steps"]
    stream = PlanStream(corpus / "tokenize", corpus / "mixture")
    loader = BatchLoader(stream, BASE, 8, record=False)
    loader.order = loader.seeded_order(steps, 0)
    switch = min(s for s in range(steps) if loader.seq_len(s) == LONG)
    _run(corpus, root / "resumed", stop_after=switch - 1)
    resumed = _run(corpus, root / "resumed")
    plain = _run(corpus, root / "plain", kind="none")
    return {"root": root, "whole": whole, "resumed": resumed, "plain": plain, "switch": switch, "corpus": corpus}


def test_the_run_switches_length_and_rope_base_at_the_phase_and_resumes_exactly(runs):
    root, switch = runs["root"], runs["switch"]
    whole = pq.read_table(root / "whole" / "steps.parquet").to_pandas()
    resumed = pq.read_table(root / "resumed" / "steps.parquet").to_pandas()
    plain = pq.read_table(root / "plain" / "steps.parquet").to_pandas()
    # resumed one step before the switch, the run crosses it as the uninterrupted one did, bit for bit
    assert whole["loss"].tolist() == resumed["loss"].tolist()
    assert whole["tokens_hash"].tolist() == resumed["tokens_hash"].tolist()
    from safetensors.torch import load_file
    a, b = load_file(str(root / "whole" / "final" / "model.safetensors")), \
        load_file(str(root / "resumed" / "final" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the RoPE base changes at the switch and not before: the same losses up to it, others from it on
    assert whole["loss"][:switch].tolist() == plain["loss"][:switch].tolist()
    assert whole["loss"][switch:].tolist() != plain["loss"][switch:].tolist()
    assert set(whole["phase"][switch:]) == {"long"}
    # the step -> token map the lineage and `tokenmill audit verify` recompute (window W: stream[W*T, (W+1)*T)) is
    # what every step trained on, in the long phase as before it
    stream = PlanStream(runs["corpus"] / "tokenize", runs["corpus"] / "mixture")
    assert all(tokens_hash(stream.read(w * STEP_TOKENS, (w + 1) * STEP_TOKENS)) == h
               for w, h in zip(whole["stream_window"], whole["tokens_hash"]))
    final = json.loads((root / "whole" / "final" / "config.json").read_text())
    assert final["seq_len"] == LONG and final["model"]["rope_theta"] == pytest.approx(10000.0 * 4 ** (16 / 14))
    assert json.loads((root / "plain" / "final" / "config.json").read_text())["model"]["rope_theta"] == 10000.0


def test_compiled_blocks_cross_the_switch_as_eager_ones(runs, corpus, tmp_path):
    """torch.compile'd blocks (train.parallel.compile) meet a new sequence shape at the switch: they compile once
    more and train on into the long phase as the eager blocks did (within compile's rounding drift, which the
    spike guard's decisions amplify over a few hundred steps: 1.8% at most over the whole run, measured)."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from tokenmill.train.loop import train

    switch = runs["switch"]
    cfg = tiny_run(token_budget=10 * BUDGET, rope_scaling={"kind": "ntk"}, checkpoint={"interval": 4, "keep": 2},
                   parallel={"compile": True})
    train(cfg, corpus, tmp_path / "compiled", None, stop_after=switch + 3)
    last = sorted((tmp_path / "compiled" / "checkpoints").glob("step_*"))[-1]
    state = {"trainer": ""}  # the trainer state alone (records of every step so far), not the weights
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(last), no_dist=True)
    got = json.loads(state["trainer"])["records"]
    want = pq.read_table(runs["root"] / "whole" / "steps.parquet").to_pandas()
    assert len(got) == switch + 3 and {r["phase"] for r in got[switch:]} == {"long"}
    assert [r["tokens_hash"] for r in got] == want["tokens_hash"][:switch + 3].tolist()
    np.testing.assert_allclose([np.nan if r["loss"] is None else r["loss"] for r in got],
                               want["loss"][:switch + 3].astype(float), rtol=0.02)


def test_the_export_computes_the_models_logits_at_the_long_length(runs, corpus, tmp_path):
    from tokenmill.export import export_run
    from tokenmill.export.hf import load_final
    from tokenmill.train.model import Transformer
    from transformers import AutoModelForCausalLM

    run = runs["root"] / "whole"
    export_run(run, corpus / "tokenizer" / "hf", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    final = json.loads((run / "final" / "config.json").read_text())
    assert config["max_position_embeddings"] == LONG
    assert config["rope_parameters"]["rope_theta"] == pytest.approx(final["model"]["rope_theta"])
    net = Transformer(parse_model(final["model"]), final["vocab_size"], LONG, final["eos_id"])
    net.load_state_dict(load_final(run)[0], strict=False)
    net.eval()
    held = heldout_documents(corpus / "tokenize", corpus / "mixture", "uint16")
    tokens = torch.tensor(np.stack([d[:LONG] for d in held if len(d) >= LONG][:2]).astype(np.int64))
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        ours, theirs = net(tokens), hf(tokens).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-4)
    # the last positions depend on the base: the export at the first phase's base would not match there
    net.set_rope_theta(10000.0)
    with torch.no_grad():
        assert not torch.allclose(net(tokens)[:, -8:], theirs[:, -8:], atol=1e-3)


def test_every_run_reports_loss_by_position_and_the_probe_to_its_longest_length(runs, corpus):
    ctx = runs["whole"]["context"]
    assert ctx["longest"] == LONG and ctx["rope_theta"] == pytest.approx(10000.0 * 4 ** (16 / 14))
    assert list(ctx["loss_by_position"]) == ["0-128"]
    # the probe at 128 tokens (32, the base length, cannot hold a 24-token needle and its repeat)
    assert set(ctx["probe"]) == {f"{LONG}@{d:g}" for d in context.DEPTHS} | {"mean"}
    assert all(np.isfinite(v) for v in ctx["probe"].values())
    # the loss by position is the model's: below the unigram entropy of the very tokens it scores, and the same
    # in the resumed run
    docs = heldout_documents(corpus / "tokenize", corpus / "mixture", "uint16")
    targets = np.concatenate([s[1:] for s in context.position_sequences(docs, LONG)]).astype(np.int64)
    assert ctx["loss_by_position"]["0-128"]["tokens"] == len(targets) > 1000
    assert ctx["loss_by_position"]["0-128"]["loss"] < unigram_entropy(targets) - 0.3
    assert runs["resumed"]["context"] == ctx


def test_loss_by_position_buckets_each_target_by_its_position():
    losses = [np.arange(600, dtype=float), np.full(100, 7.0)]  # the loss of target p is p in the first document
    out = context.loss_by_position(losses, 600)
    assert list(out) == ["0-128", "128-512", "512-600"]
    assert out["0-128"] == {"loss": pytest.approx((np.arange(128).sum() + 700) / 228), "tokens": 228}
    assert out["128-512"] == {"loss": pytest.approx(np.arange(128, 512).mean()), "tokens": 384}
    assert out["512-600"]["tokens"] == 88
    assert [context.label(*b) for b in context.position_buckets(32768)] == \
        ["0-128", "128-512", "512-2K", "2K-8K", "8K-32K"]


def test_the_probe_credits_a_model_that_reads_the_needle_and_no_other(corpus):
    """Scored by two reference models instead of a trained one: a copier (predicts the token that followed the last
    earlier occurrence of the current token, the induction rule) gains from the needle at every depth; a
    unigram model, which ignores context, gains exactly nothing."""
    docs = heldout_documents(corpus / "tokenize", corpus / "mixture", "uint16")
    cases = context.probe_cases(docs, [BASE * 4, LONG * 2], cases=4)
    assert {(c.length, c.depth) for c in cases} == {(n, d) for n in (128, 256) for d in context.DEPTHS}
    assert all(len(c.needle) == len(c.control) == c.length for c in cases)
    assert all(np.array_equal(c.needle[-context.NEEDLE:], c.needle[int(c.depth * (c.length - 48)):][:24])
               for c in cases)
    pool = np.concatenate(docs)
    freq = np.bincount(pool, minlength=int(pool.max()) + 1) + 1.0
    logp_unigram = np.log(freq / freq.sum())

    def unigram(w: np.ndarray, k: int) -> float:
        return float(logp_unigram[w[-k:]].sum())

    def copier(w: np.ndarray, k: int) -> float:
        total = 0.0
        for i in range(len(w) - k, len(w)):
            prev = [j for j in range(i - 1) if w[j] == w[i - 1]]
            hit = bool(prev) and w[prev[-1] + 1] == w[i]
            total += np.log(0.9) if hit else np.log(0.1) + logp_unigram[w[i]]
        return total

    for scorer, expect in ((copier, "gains"), (unigram, "none")):
        needle = np.array([scorer(c.needle, c.answer) for c in cases])
        control = np.array([scorer(c.control, c.answer) for c in cases])
        figures = context.probe_figures(cases, needle, control)
        if expect == "gains":
            assert all(v > 1.0 for k, v in figures.items()), figures
        else:
            assert all(v == 0.0 for v in figures.values()), figures
