"""The demo DAG end to end, driven through dvc in a temporary copy of the project.

One build on purpose (a module fixture): it builds a small embedded corpus with `dvc repro` while every stage
records what it imports, reads and asks for (tokenmill.trace), then checks that every planted case ends with
the fate its ground truth says, that the audit CLI explains them, that every stage declares what it
touches, and that DVC does exactly the work a change needs: nothing for a forced rerun that reproduces its
output, one stage for a comment edit, the plan and below for a mixture experiment.
"""

import html
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

import dvc_deps
from tiny_run import copy_project, small_benchmarks
from tiny_run import run as _run  # dvc and tokenmill from this venv, a git identity, no progress bars
from tokenmill import lineage
from tokenmill.config import compose
from tokenmill.evaluate import track
from tokenmill.evaluate.signal import CANDIDATES, run_figures

ROOT = Path(__file__).resolve().parents[1]
DATA_STAGES = ["benchmarks", "sample", "ingest", "filter", "pii", "dedup", "quality", "decontaminate", "embed",
               "backcheck", "domains", "tokenizer", "tokenize", "evalset"]


def _check_step_tokens(con, token_dir, step):
    """The full run's step: the window it read (train.data_seed shuffles them within each phase)."""
    (window,) = con.execute("SELECT stream_window FROM train_steps WHERE run = 'pretrain' AND step = ?", [step]).fetchone()
    per_step, rows = lineage.step_spans(con, window)
    plan = con.execute("SELECT shard, \"offset\", length FROM plan ORDER BY position").fetchall()
    stream = np.concatenate([np.fromfile(token_dir / shard, dtype=np.uint16)[off: off + n + 1]
                             for shard, off, n in plan])
    spans = np.concatenate([np.fromfile(token_dir / r[5], dtype=np.uint16)[r[6] + r[7]: r[6] + r[8]] for r in rows])
    assert len(spans) == per_step
    assert np.array_equal(spans, stream[window * per_step:(window + 1) * per_step])
    eos = json.loads((token_dir / "manifest.json").read_text())["eos_id"]
    assert (stream == eos).sum() == len(plan)  # exactly one end-of-text per planned document


# The demo at test size. No real benchmark items are planted here: each planted item takes one of the crawl's
# most prose-like pages, and at ~500 pages those are what the near-duplicate originals need to pass the filter
# (4 planted items left 2 of 5 near duplicates reaching dedup); tests/test_report.py's tiny run plants 11 and
# checks them caught, tests/test_sample.py checks the planting. Written into the copy's conf/config.yaml (not passed as overrides) so that
# `dvc exp run`, which recomposes params.yaml from conf/, composes the same small configuration.
TEST_SIZE = """
sample: {n_docs: 800, eval_items: 40, planted_eval_items: 8, planted_benchmark_items: 0}
tokenizer: {vocab_size: 2000}
tokenize: {canaries: {candidates: 99}}   # each run scores 12 x 100 canary requests, not 12 x 1000
model: {n_layers: 2, d_model: 64, n_heads: 2, n_kv_heads: 1, ffn_dim: 192}
train:
  token_budget: 300000
  global_batch: 4           # 1024 tokens a step: ~290 steps, enough for a 2-layer model to learn bigrams
  optimizer: {lr: 1.0e-2}
  launch: {nproc_per_node: 2}
  logging: {log_interval: 10, eval_interval: 100}
  checkpoint: {interval: 100}
evaluate: {limit: 24, heldout_limit: 4, inloop_items: 6}
mixture: {heldout_fraction: 0.1}   # 2-4 held-out documents per bucket (0.01: one), for tokenmill compare
"""
# A two-rung ladder (the fewest a power law can be fitted to) keeps the test's three pipelines short.
TEST_SCOUTS = """# @package scouts
s1: {model: {name: t1, n_layers: 1, d_model: 32, n_heads: 1, n_kv_heads: 1, ffn_dim: 96}, token_budget: 60000, seeds: 2}
s2: {model: {name: t2, n_layers: 2, d_model: 48, n_heads: 2, n_kv_heads: 1, ffn_dim: 144}, token_budget: 120000}
"""
# The stages of the test's build, with its ladder.
STAGES = list(dvc_deps.expand(yaml.safe_load((ROOT / "dvc.yaml").read_text()),
                              {"scouts": yaml.safe_load(TEST_SCOUTS)})["stages"])


def _fresh_clone(root: Path) -> Path:
    """What a new user has after cloning: the tracked project, the test size, a git commit; no outputs."""
    repo = root / "repo"
    copy_project(repo)
    (repo / "conf" / "scouts" / "test.yaml").write_text(TEST_SCOUTS)
    scale = (repo / "conf" / "scale" / "cpu_demo.yaml").read_text()  # the scale picks its ladder
    assert "  - /scouts: cpu_demo\n" in scale
    (repo / "conf" / "scale" / "cpu_demo.yaml").write_text(scale.replace("/scouts: cpu_demo", "/scouts: test"))
    small_benchmarks(repo / "conf" / "config.yaml")
    with open(repo / "conf" / "config.yaml", "a") as f:
        f.write(TEST_SIZE)
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["dvc", "config", "hydra.enabled", "True"], repo)
    compose([], conf_dir=repo / "conf", output=repo / "params.yaml")
    _run(["git", "add", "-A"], repo)  # as in a real checkout: DVCLive logs against the current commit
    _run(["git", "commit", "-qm", "demo"], repo)
    return repo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    repo = _fresh_clone(tmp_path_factory.mktemp("demo"))
    out = _run(["dvc", "repro"], repo, TOKENMILL_TRACE_DIR=str(repo / ".trace")).stdout
    lock = (repo / "dvc.lock").read_text()  # as built, before the tests below run experiments in it
    return repo, out, lock


def test_dvc_runs_the_forecast_before_the_full_run_and_shows_it_before_the_plan():
    """dvc.yaml's block order is DVC's tie-break twice: the run order of stages that do not depend on each other
    (the forecast must be made before the full run trains) and the order of `dvc exp show`'s metric columns (the
    forecast and the decision before the plan's 13 columns, which folded the decision out of a 200-column table
    while the plan came first). Declaring evaluate first once put the full run before the forecast."""
    from dvc.repo import Repo
    from dvc.repo.reproduce import get_active_graph, plan_repro

    with Repo(str(ROOT)) as repo:
        order = [s.addressing for s in plan_repro(get_active_graph(repo.index.graph), repo.stage.collect("dvc.yaml"))]
        metrics = [Path(os.path.relpath(out.fs_path, ROOT)).as_posix() for out in repo.index.metrics]
    assert order.index("forecast") < order.index("pretrain"), order
    assert order.index("mixture") < min(i for i, s in enumerate(order) if s.startswith("scout@")), order
    assert (metrics.index("metrics/forecast.json") < metrics.index("metrics/decision.json")
            < metrics.index("metrics/mixture.json")), metrics


def _ran(out: str) -> set[str]:
    return {s for s in STAGES if f"Running stage '{s}'" in out}


def _outs(repo: Path) -> dict[str, str]:
    """Every output's hash in dvc.lock, by path."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {o["path"]: o.get("md5") for st in lock["stages"].values() for o in st.get("outs", [])}


@pytest.mark.slow
def test_demo_dag(demo):
    repo, out, _ = demo
    assert _ran(out) == set(STAGES)
    verify = _run(["tokenmill", "audit", "verify"], repo)
    assert "conservation holds" in verify.stdout
    # DVC reads every declared metric, the forecast and the decision before the plan (the mixture stage is declared
    # after evaluate in dvc.yaml); a metric key named `error` (the report's forecast residual) once made it say it
    # "failed to load some metrics".
    metrics = _run(["dvc", "metrics", "show", "--json"], repo)
    assert "failed to load" not in metrics.stderr, metrics.stderr
    files = list(json.loads(metrics.stdout)[""]["data"])
    assert files.index("metrics/forecast.json") < files.index("metrics/decision.json") < files.index("metrics/mixture.json"), files
    assert "residual" in json.loads((repo / "metrics" / "report.json").read_text())["forecast_error"]
    # The seed replica trained the rung's windows in another order, and its fed tokens check out against the
    # plan window by window; its scores carry a seed spread beside the checkpoint spread.
    assert "scout@s1#seed1" in verify.stdout.split("fed exactly the plan's tokens")[1].splitlines()[0]
    replica = pq.read_table(repo / "data" / "train" / "scout" / "s1" / "replicas" / "seed1" / "steps.parquet")
    windows = replica.column("stream_window").to_pylist()
    assert sorted(windows) == list(range(len(windows))) and windows != sorted(windows)
    rung = json.loads((repo / "metrics" / "train" / "scout" / "s1.json").read_text())["scout"]
    assert rung["seeds"] == 2 and rung["heldout_mean_seed_sigma"] > 0 and rung["benchmarks_bpb_seed_sigma"] > 0

    truth = json.loads((repo / "data" / "sample" / "ground_truth.json").read_text())
    con = lineage.connect(repo / "lineage" / lineage.DB_NAME, extra=lineage.audit_tables(repo))
    # The default canaries (tokenize.canaries: 2 per visit count 0-16) were planted, placed, trained and scored by
    # every run (the conservation above counted them apart); a run trains the visits of the windows it read.
    planted = pq.read_table(repo / "data" / "tokenize" / "canaries.parquet").to_pylist()
    assert len(planted) == 12 and sum(c["planned_visits"] for c in planted) == 62
    runs = {json.loads((f.parent / "manifest.json").read_text())["stage"]: pq.read_table(f).to_pylist()
            for f in (repo / "data" / "train").rglob("canaries.parquet")}
    assert set(runs) == {"pretrain", "scout@s1", "scout@s1#seed1", "scout@s2"} and all(len(r) == 12 for r in runs.values())
    story = {(r["run"], r["canary"]): r for r in lineage.canary_exposure(con)}
    full = [story[("pretrain", c["canary"])] for c in planted]
    assert all(r["trained_visits"] <= r["planned_visits"] for r in full) and sum(r["trained_visits"] for r in full) >= 31
    assert all(r["trained_visits"] == 0 for r in full if r["planned_visits"] == 0)
    shown = _run(["tokenmill", "audit", "canary", "s0-v16"], repo).stdout
    for run, rows in runs.items():
        r = next(x for x in rows if x["canary"] == "s0-v16")
        assert f"exposure {r['exposure']:.2f} bits (rank {r['rank']} of {r['candidates'] + 1})" in shown, (run, shown)
    assert json.loads((repo / "reports" / "report.json").read_text())["sections"]["canaries"] == "ok"

    # The domains stage labelled every document that reached it: each kept document has its topic, format and
    # toxicity score in the lineage, the topics' sizes add up to them, and the report shows the mix.
    labelled = con.execute("""SELECT count(*), count(topic), count(format), count(toxicity) FROM documents
                              WHERE fate = 'kept'""").fetchone()
    assert labelled[0] > 0 and len(set(labelled)) == 1, labelled
    sizes = con.execute("SELECT sum(documents), count(*) FROM topics").fetchone()
    assert sizes[0] == con.execute("SELECT count(*) FROM decisions WHERE stage = 'domains'").fetchone()[0]
    assert sizes[1] == 12 and con.execute("SELECT count(DISTINCT topic) FROM documents").fetchone()[0] == 12
    assert json.loads((repo / "reports" / "report.json").read_text())["sections"]["domains"] == "ok"

    # The embedding back-checks ran after MinHash: each semantic cluster keeps exactly one document, its longest,
    # every member is in the lineage with it, and by default nothing is removed (reported only).
    clusters = con.execute("""SELECT s.cluster, count(*) FILTER (WHERE s.kept), count(*), any_value(s.cluster_size),
                                     max(d.final_text_chars) = any_value(d.final_text_chars) FILTER (WHERE s.kept)
                              FROM semantic_duplicates s JOIN documents d USING (doc_id) GROUP BY s.cluster""").fetchall()
    assert clusters and all(kept == 1 and n == size and longest for _, kept, n, size, longest in clusters), clusters
    assert con.execute("SELECT count(*) FROM decisions WHERE stage = 'backcheck' AND action = 'drop'").fetchone()[0] == 0
    assert {s for (s,) in con.execute("SELECT DISTINCT status FROM contamination").fetchall()} <= \
        {"contaminated", "near_miss", "suspect"}

    # Every stage that ran left its run record: the audit's stage_runs has a row for each (issue 11, item 4).
    # The seed replica of the first rung (TEST_SCOUTS: seeds 2) has its own run record.
    assert {s for (s,) in con.execute("SELECT stage FROM stage_runs").fetchall()} == set(STAGES) | {"scout@s1#seed1", "anneal@reference#with", "anneal@reference#without"}
    # One record format, written by one function (runtime.run_record): training's rows name their code files
    # and host like every other stage's.
    partial = con.execute("SELECT stage FROM stage_runs WHERE host IS NULL OR code_files IN ('null', '[]')").fetchall()
    assert partial == [], partial
    # Every planted case is scored by the lineage stage (src/tokenmill/lineage/planted.py): none may be
    # handled wrongly, and for every kind most must have reached the stage meant to catch them (the rest were
    # removed by an earlier stage, so never reach training either).
    verdicts = {}
    for kind, verdict, n in con.execute("SELECT case_kind, verdict, count(*) FROM planted_cases GROUP BY ALL").fetchall():
        verdicts.setdefault(kind, {})[verdict] = n
    wrong = con.execute("SELECT case_kind, url, explanation FROM planted_cases WHERE verdict = 'wrong'").fetchall()
    assert not wrong, wrong
    assert set(verdicts) == {"truncated_record", "non_utf8", "non_english", "spam", "boilerplate", "pii",
                             "exact_duplicate", "near_duplicate", "contaminated"}
    for kind, v in verdicts.items():
        assert v.get("caught", 0) >= max(1, sum(v.values()) / 2), (kind, v)

    # Every planted benchmark item that reached decontaminate is in the contamination table, against its page.
    contaminated = {(url, item) for url, item in con.execute("""SELECT r.url, c.item_id FROM contamination c
        JOIN records r USING (doc_id) WHERE c.contaminated""").fetchall()}
    caught = {u for (u,) in con.execute("SELECT url FROM planted_cases WHERE case_kind = 'contaminated' "
                                         "AND verdict = 'caught'").fetchall()}
    for case in (c for c in truth["cases"] if c["case"] == "contaminated" and c["url"] in caught):
        assert (case["url"], case["eval_item"]) in contaminated, case

    # Non-UTF-8 pages are decoded with their declared charset: the extracted text holds the snippet.
    files = duckdb.connect()  # the audit connection is sealed from the file system; stage outputs are read here
    docs = files.execute("SELECT url, text, charset FROM read_parquet(?)",
                       [str(repo / "data" / "ingest" / "documents" / "*.parquet")]).fetchall()
    text_of = {url: (text, charset) for url, text, charset in docs}
    for case in (c for c in truth["cases"] if c["case"] == "non_utf8"):
        text, charset = text_of[case["url"]]
        assert case["snippet"] in text, (case, charset)

    # Planted personal data is gone after the pii stage; Luhn-invalid card-like numbers are left alone.
    pii_text = dict(files.execute("SELECT url, text FROM read_parquet(?)",
                                [str(repo / "data" / "pii" / "documents" / "*.parquet")]).fetchall())
    pii_cases = [c for c in truth["cases"] if c["case"] == "pii"]
    assert pii_cases and all(c["url"] in pii_text for c in pii_cases)
    for case in pii_cases:
        for entity in case["entities"]:
            present = entity["value"] in pii_text[case["url"]]
            assert present == (entity["type"] == "not_credit_card"), (case["url"], entity)

    # The audit explains the truncated record, a non-UTF-8 page and a normal page.
    ingest_cases = [c for c in truth["cases"] if "ingest" in c["expect"]]
    truncated = next(c for c in ingest_cases if c["case"] == "truncated_record")
    shown = _run(["tokenmill", "audit", "doc", truncated["url"]], repo).stdout
    assert "truncated_record" in shown and "read error" in shown
    non_utf8 = next(c for c in ingest_cases if c["case"] == "non_utf8")
    shown = _run(["tokenmill", "audit", "doc", non_utf8["url"]], repo).stdout
    assert "keep (extracted)" in shown
    dup_id = con.execute("""SELECT doc_id FROM decisions WHERE stage = 'dedup' AND reason = 'near_duplicate'
                            LIMIT 1""").fetchone()[0]
    shown = _run(["tokenmill", "audit", "doc", dup_id], repo).stdout
    assert "near_duplicate" in shown and "duplicate_of" in shown and "cluster_id" in shown
    planted = next(c for c in truth["cases"] if c["case"] == "contaminated")
    shown = _run(["tokenmill", "audit", "doc", planted["url"]], repo).stdout
    assert "contaminated" in shown and planted["eval_item"] in shown
    normal = con.execute("SELECT url FROM documents WHERE source = 'sample_code' AND fate = 'kept' LIMIT 1").fetchone()[0]
    shown = _run(["tokenmill", "audit", "doc", normal], repo).stdout
    assert "kept by every stage" in shown and "tokens in tokens/code/" in shown and "mixture" in shown

    # A training step is recomputable from the plan: its spans, read from the token shards, are exactly
    # the stream's tokens at that step, and `tokenmill audit step` lists them.
    _check_step_tokens(con, repo / "data" / "tokenize", step=3)
    shown = _run(["tokenmill", "audit", "step", "3"], repo).stdout  # the full run's step 3 by default
    assert "run pretrain's step 3: window" in shown
    assert _run(["tokenmill", "audit", "step", "99999999"], repo, check=False).returncode == 1

    # Training: the scouts and the full run trained from the plan, and learned: the held-out loss ends well
    # below the unigram entropy of the held-out tokens — the cross-entropy of a model that ignores context,
    # its token frequencies counted on the training stream (add-one smoothed).
    summary = json.loads((repo / "data" / "train" / "pretrain" / "summary.json").read_text())

    def tokens_of(table):
        rows = con.execute(f'SELECT shard, "offset", length FROM {table}').fetchall()
        return np.concatenate([np.fromfile(repo / "data" / "tokenize" / shard, dtype=np.uint16)[off: off + n]
                               for shard, off, n in rows])

    counts = np.bincount(tokens_of("plan"), minlength=2000) + 1.0
    unigram = float(-np.log((counts / counts.sum())[tokens_of("heldout")]).mean())
    final = np.mean(list(summary["heldout_loss"].values()))
    # Measured at this size: 5.92 against 6.17 (the crawl without pages that share 8 words with a real
    # benchmark item); the full demo: 0.95 nats below (RESULTS.md). A model of token frequencies alone cannot
    # go below the unigram cross-entropy, so any margin shows context learnt; 0.2 nats is a clear one.
    assert final < unigram - 0.2, (final, unigram, summary)
    for scout in ("s1", "s2"):
        assert (repo / "data" / "train" / "scout" / scout / "final" / "model.safetensors").is_file()

    # The forecast was made from the scouts before the full run trained, and is a loss of the right scale.
    assert out.index("Running stage 'forecast'") < out.index("Running stage 'pretrain'")
    predicted = json.loads((repo / "metrics" / "forecast.json").read_text())["forecast_loss"]
    assert 0 < predicted < np.log(2000) + 1

    # The export loads in transformers with no custom code; evaluate scored the embedded eval set on all and
    # on clean items, its dirty items exactly the contaminated ones of the contamination table.
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(repo / "data" / "export" / "hf")
    tok = AutoTokenizer.from_pretrained(repo / "data" / "export" / "hf")
    assert model.config.vocab_size == 2000 and tok("hello world")["input_ids"]
    results = json.loads((repo / "data" / "evaluate" / "results.json").read_text())
    bench = results["benchmarks"]["tokenmill_heldout"]
    scored = [json.loads(line) for line in (repo / "data" / "evaluate" / results["samples"][
        next(t for t in results["samples"] if "tokenmill_heldout" in t)]).read_text().splitlines()]
    table = duckdb.connect().execute(
        "SELECT DISTINCT item_id FROM read_parquet(?) WHERE benchmark = 'tokenmill_heldout' AND contaminated",
        [str(repo / "data" / "decontaminate" / "contamination" / "*.parquet")]).fetchall()
    dirty = {r[0] for r in table} & {r["item_id"] for r in scored}
    assert bench["dirty_items"] == len(dirty) == sum(r["dirty"] for r in scored) > 0
    metrics = json.loads((repo / "metrics" / "evaluate.json").read_text())["tokenmill_heldout"]
    assert metrics["dirty_items"] == len(dirty) and metrics["acc_clean"] is not None

    # The report holds every section, none "not run" (tests/test_report.py opens one in a real browser).
    report = json.loads((repo / "reports" / "report.json").read_text())
    assert report["images"] and all((repo / "reports" / i).is_file() for i in report["images"])
    assert report["not_run"] == {}, report["not_run"]

    # The batch of a step, rebuilt from the plan by the audit, is what the trainer fed (hash per step), and
    # the audit shows the step's loss and which steps saw a document.
    fed = con.execute("SELECT tokens_hash, loss, stream_window FROM train_steps WHERE run = 'pretrain' AND step = 3"
                      ).fetchone()
    from tokenmill.train.data import tokens_hash
    assert tokens_hash(lineage.step_tokens(con, repo / "data", fed[2])) == fed[0]
    shown = _run(["tokenmill", "audit", "step", "3", "--run", "pretrain"], repo).stdout
    assert f"loss {fed[1]:.4f}" in shown and fed[0] in shown
    verify = _run(["tokenmill", "audit", "verify"], repo).stdout
    assert "training runs fed exactly the plan's tokens" in verify and "pretrain" in verify
    trained_doc = con.execute("SELECT doc_id FROM plan WHERE stream_start < 1024 * 3 LIMIT 1").fetchone()[0]
    shown = _run(["tokenmill", "audit", "doc", trained_doc], repo).stdout
    assert "trained       pretrain:" in shown and "scout@s1:" in shown, shown
    con.close()

    # Unchanged pipeline: nothing reruns.
    assert "Data and pipelines are up to date" in _run(["dvc", "repro"], repo).stdout


@pytest.mark.slow
def test_mixture_experiments(demo):
    """`dvc exp run -S mixture=<preset>` reruns only what the mixture reaches, a seed-only experiment only the
    full run and what reads it; `tokenmill compare` judges them and `dvc exp show` lists them side by side.
    (A queued experiment, which runs from a temporary copy, is test_real_crawl_preset_runs_as_shipped's.)"""
    repo, _, _ = demo
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "demo baseline"], repo)

    before = _outs(repo)
    # A mixture without the code bucket (Hydra's `~` deletes a key; repeating the other buckets more needs a
    # higher epoch cap).
    # Both experiments stop at their evaluation, which is all `tokenmill compare` reads: forecast, lineage and
    # report of a changed mixture are the work test_demo_dag checks once (about a minute less to run here).
    out = _run(["dvc", "exp", "run", "-n", "no-code", *NO_CODE, "evaluate"], repo).stdout
    # One vocabulary for every mixture: the tokenizer and the token shards are not rebuilt.
    # (the anneal branches from the full run but nothing before the evaluation reads it)
    assert _ran(out) == set(STAGES) - set(DATA_STAGES) - {"forecast", "lineage", "report", "anneal"}, out
    after = _outs(repo)
    assert after["data/tokenizer"] == before["data/tokenizer"] and after["data/tokenize"] == before["data/tokenize"]
    assert after["data/mixture"] != before["data/mixture"]
    assert yaml.safe_load((repo / "params.yaml").read_text())["mixture"]["name"] == "no_code"
    # The same pipeline with other seeds only (the initialisation and the order of the plan's windows): the
    # full run trains again, the ladder does not (its rungs have seeds of their own).
    _run(["git", "checkout", "--", "."], repo)
    out = _run(["dvc", "exp", "run", "-n", "seed-1", "-S", "train.seed=1", "-S", "train.data_seed=1", "evaluate"],
               repo).stdout
    assert _ran(out) == {"check", "pretrain", "export", "evaluate"}, out  # check validates every parameter
    _run(["git", "checkout", "--", "."], repo)  # the workspace back to the baseline: its lock, then its outputs
    _run(["dvc", "checkout"], repo)

    shown = json.loads(_run(["dvc", "exp", "show", "--json"], repo).stdout)
    rows, evaluated, headline, decisions = {}, {}, {}, {}
    for commit in shown:
        for exp in commit.get("experiments") or []:
            for rev in exp["revs"]:
                data = rev["data"]
                name = data["params"]["params.yaml"]["data"]["mixture"]["name"]
                metrics = data["metrics"]["metrics/mixture.json"]["data"]
                rows[rev.get("name") or name] = (name, metrics["planned"])
                headline[name] = decisions[rev["name"]] = data["metrics"]["metrics/decision.json"]["data"]
                # The detail is not a DVC metric but is in the experiment's commit (cache: false, in git).
                assert "metrics/evaluate.json" not in data["metrics"], sorted(data["metrics"])
                evaluated[name] = json.loads(_run(["git", "show", f"{data['rev']}:metrics/evaluate.json"], repo).stdout)
    assert set(rows) == {"no-code", "seed-1"}, rows
    assert rows["no-code"][0] == "no_code" and rows["no-code"][1].get("code", 0) == 0 < rows["seed-1"][1]["code"]
    # The headline: the decision metric, the full run's value on it and its σ, held-out bits per byte per bucket
    # with their standard errors — the same figures as the detail and the run's own record.
    top = headline["no_code"]
    assert top["decision_metric"] == evaluated["no_code"]["decision_metric"] in CANDIDATES, top
    assert top["heldout_bpb"] == evaluated["no_code"]["bits_per_byte"] and set(top["heldout_bpb_stderr"]) == \
        set(top["heldout_bpb"]) and top["decision_sigma"] > 0, top
    # The baseline's headline value is its full run's own figure on the decision metric, from the run's summary.
    base = json.loads((repo / "metrics" / "decision.json").read_text())
    full = run_figures(json.loads((repo / "data" / "train" / "pretrain" / "summary.json").read_text()))
    assert base["decision"] == pytest.approx(full[base["decision_metric"]][0], abs=1e-6), base
    # One decision metric for the baseline and every experiment (the track record's): one scale in the column.
    assert {d["decision_metric"] for d in [base, *decisions.values()]} == {track.decision_metric(track.load(repo))}, \
        decisions
    # The DVC metrics that vary over the experiments and their baseline are headline-sized (850 columns before).
    varying: dict[str, set] = {}
    for commit in shown:
        for data in [commit["data"], *(r["data"] for e in commit.get("experiments") or [] for r in e["revs"])]:
            for path, metrics in data["metrics"].items():
                for key, value in _leaves(metrics["data"]).items():
                    varying.setdefault(f"{path}:{key}", set()).add(json.dumps(value))
    varying = {k for k, v in varying.items() if len(v) > 1}
    assert {k.split(":")[0] for k in varying} <= {"metrics/mixture.json", "metrics/decision.json",
                                                  "metrics/forecast.json", "metrics/lineage.json",
                                                  "metrics/report.json"}, varying
    assert len(varying) <= 40, sorted(varying)
    # Each experiment carries its own evaluation: every metric on all and on clean items, side by side, each
    # with its standard error; the real benchmarks among them; and the decision metric over its ladder.
    for name in ("no_code",):
        assert {"acc", "acc_clean", "dirty_items"} <= set(evaluated[name]["tokenmill_heldout"]), evaluated
        for bench in ("arc_easy", "hellaswag", "mmlu", "winogrande"):
            assert {"acc", "bpb", "bpb_stderr", "bpb_clean", "prob_norm", "prob_norm_stderr"} <= \
                set(evaluated[name][bench]), (bench, evaluated[name][bench])
        assert evaluated[name]["decision_metric"] is not None

    # `tokenmill compare` reads the experiments through DVC (no checkout): the workspace is untouched, the
    # numbers are those of each experiment's own evaluation. On the held-out code documents the mixture
    # without code loses, by more than the noise; the seed-only pair has no winner (measured: 5.7 σ and
    # 0.4 σ, RESULTS "Compare").
    baseline = _run(["git", "rev-parse", "HEAD"], repo).stdout.strip()
    before = _outs(repo)
    real = json.loads(_run(["tokenmill", "compare", "no-code", baseline, "--metric", "heldout_bpb.code",
                            "--metric", "arc_easy.bpb", "--json"], repo).stdout)["comparisons"]
    assert real[0]["winner"] == baseline, real[0]["verdict"]
    assert real[0]["pairs"][0]["items"] >= 3  # held-out code documents, each scored by both
    values = {r["name"]: r["value"] for r in real[1]["ranking"]}
    assert values["no-code"] == pytest.approx(evaluated["no_code"]["arc_easy"]["bpb"], abs=1e-5)
    assert real[1]["pairs"][0]["items"] == 24
    seed = json.loads(_run(["tokenmill", "compare", "seed-1", baseline, "--metric", "heldout_bpb.code", "--json",
                            "--html", str(repo / "decision")], repo).stdout)["comparisons"][0]
    assert seed["winner"] is None and seed["verdict"].startswith("no winner: the difference is within the noise")
    # All three: the baseline and its seed replica are one recipe, whose spread is its training noise, and that
    # recipe wins over the mixture without code.
    three = json.loads(_run(["tokenmill", "compare", "no-code", baseline, "seed-1", "--metric", "heldout_bpb.code",
                             "--json"], repo).stdout)["comparisons"][0]
    assert three["winner"] in (baseline, "seed-1"), three["verdict"]
    assert {r["name"]: r["replicas"] for r in three["ranking"]} == {"no-code": [], baseline: ["seed-1"],
                                                                    "seed-1": [baseline]}
    # A verdict at a scout rung: each experiment's rung mean over its seed replicas (the workspace holds the
    # baseline's), with the rung's track record against the full run beside it.
    rung = json.loads(_run(["tokenmill", "compare", "no-code", baseline, "--rung", "s1", "--json"], repo).stdout)
    rung = rung["comparisons"][0]
    s1 = repo / "data" / "train" / "scout" / "s1"
    runs = [json.loads(p.read_text()) for p in [s1 / "summary.json", *sorted(s1.glob("replicas/*/summary.json"))]]
    assert len(runs) == 2
    mean = sum(sum(r["heldout_loss"].values()) / len(r["heldout_loss"]) for r in runs) / len(runs)
    assert {r["name"]: r["value"] for r in rung["ranking"]}[baseline] == pytest.approx(mean, rel=1e-9)
    assert rung["track_record"].startswith("track record: s1 on heldout_mean"), rung
    assert _outs(repo) == before
    # The decision page of the same comparison: its verdict, and the forecast of this workspace's full run.
    page = (repo / "decision" / "index.html").read_text()
    assert html.escape(seed["verdict"]) in page and "Ranking on heldout_bpb.code" in page and "Forecast against the naive" in page

    # Every `dvc exp show` the README and docs show: a table that fits 200 columns, with the columns it promises
    # and no cell cut to `…` (a --keep without --drop once printed a table of `…` cells).
    # The bare `dvc exp show --only-changed` in a 200-column terminal shows the decision: DVC orders the columns
    # as dvc.yaml declares the metrics files and the mixture stage is declared after evaluate, so the forecast,
    # the decision and its σ come before the plan's counts and the parameters, which DVC folds into `…`
    # (declared before the scouts, the plan's 13 columns came first and the decision was folded away).
    bare = _run(["dvc", "exp", "show", "--only-changed", "--no-pager"], repo, COLUMNS="200").stdout
    assert max(len(line) for line in bare.splitlines()) <= 200, bare
    header = next(line for line in bare.splitlines() if "Experiment" in line).split()
    at = header.index("decision")
    assert header[:2] == ["Experiment", "Created"] and header[at + 1] == "decision_sigma", bare
    # The forecast's columns come first where an experiment changed the forecast (a full `dvc exp run`); these
    # experiments stop at evaluate, which the forecast does not feed, so theirs is unchanged and not shown.
    assert set(header[2:at]) <= {"forecast_high", "forecast_loss", "forecast_low"}, bare
    assert all(h.startswith("heldout_bpb.") or h == "…" for h in header[at + 2:]), bare
    for name, figures in decisions.items():  # each experiment's decision and σ, as DVC rounds them
        row = next(line for line in bare.splitlines() if f"[{name}]" in line)
        assert f" {figures['decision']:.5g} " in row and f" {figures['decision_sigma']:.5g} " in row, (name, row)
    shown_commands = documented_exp_show()
    assert set(shown_commands) == set(EXP_SHOW_COLUMNS), shown_commands  # a new documented command needs its row here
    for command in shown_commands:
        table = _run([*shlex.split(command), "--no-pager"], repo, COLUMNS="200").stdout
        assert max(len(line) for line in table.splitlines()) <= 200, (command, table)
        for column in EXP_SHOW_COLUMNS[command]:
            assert column in table, (command, column, table)
        assert "no-code" in table and "seed-1" in table and "…" not in table, (command, table)
    shown = _run(["dvc", "plots", "show", "-o", str(repo / "plots_html")], repo).stdout
    plots_page = (repo / "plots_html" / "index.html").read_text()
    assert "funnel.json" in plots_page and "mixture_buckets.json" in plots_page, shown


NO_CODE = ["-S", "~mixture.phases.bulk.weights.code", "-S", "~mixture.phases.anneal.weights.code",
           "-S", "mixture.name=no_code", "-S", "mixture.max_epochs.default=8"]
SHARED = ROOT / ".." / "shared" / "data"

# The `dvc exp show` commands README.md and docs/ document, and the columns each promises.
EXP_SHOW_COLUMNS = {
    "dvc exp show --only-changed --drop '.*' --keep '^(Experiment|mixture\\.name|decision(_sigma)?|heldout_bpb\\..*)$'":
        ("Experiment", "mixture.name", "decision", "decision_sigma", "heldout_bpb.code", "heldout_bpb.web/high"),
    "dvc exp show --only-changed --drop '.*' --keep '^(Experiment|mixture\\.name|unique_documents|planned\\..*|"
    "decision)$'": ("Experiment", "mixture.name", "planned.code", "unique_documents", "decision"),
}


def _leaves(tree, prefix: str = "") -> dict:
    """{dotted key: value} of a nested dict, as `dvc exp show` makes its columns."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    return {k: v for key, sub in tree.items() for k, v in _leaves(sub, f"{prefix}.{key}" if prefix else key).items()}


def documented_exp_show() -> list[str]:
    """Each line of a code block in README.md and docs/*.md that runs `dvc exp show`, without its comment."""
    commands = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in doc.read_text().splitlines():
            if line.startswith("dvc exp show"):
                commands.append(line.split("  #")[0].strip())
    return commands


@pytest.mark.slow
def test_every_stage_declares_what_it_touches(demo):
    """Modules imported, project paths read and parameters asked for, per stage (tokenmill.trace), are all
    declared in dvc.yaml — and the check really fails when a declaration is missing."""
    repo, _, _ = demo
    dvc = dvc_deps.expand(yaml.safe_load((repo / "dvc.yaml").read_text()),
                          yaml.safe_load((repo / "params.yaml").read_text()))
    traces = dvc_deps.read_traces(repo / ".trace")
    # The stages ran this checkout's tokenmill (an editable install): modules map from ROOT/src to repo/src.
    assert dvc_deps.check(dvc, traces, repo, src=ROOT / "src") == []

    broken = json.loads(json.dumps(dvc))
    broken["stages"]["mixture"]["deps"].remove("data/tokenize")
    broken["stages"]["filter"]["deps"].remove("src/tokenmill/filters")
    broken["stages"]["mixture"]["params"].append("train")
    problems = "\n".join(dvc_deps.check(broken, traces, repo, src=ROOT / "src"))
    assert "mixture: reads data/tokenize/" in problems or "mixture: lists data/tokenize" in problems, problems
    assert "filter: imports tokenmill.filters" in problems, problems
    assert "mixture: declares parameter 'train' but never reads it" in problems, problems


@pytest.mark.slow
def test_forced_rerun_and_comment_edit_do_only_their_own_work(demo):
    """`dvc repro -f -s dedup` reproduces dedup's output byte for byte: no hash in dvc.lock changes and
    nothing below it runs. A comment edit in the pii module reruns pii alone."""
    repo, _, _ = demo
    before = _outs(repo)
    out = _run(["dvc", "repro", "-f", "-s", "dedup"], repo).stdout
    assert _ran(out) == {"dedup"}, out
    assert _outs(repo) == before
    out = _run(["dvc", "repro"], repo).stdout
    assert _ran(out) == set(), out

    module = repo / "src" / "tokenmill" / "pii" / "detectors.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# a comment changes no redaction\n")
        out = _run(["dvc", "repro"], repo).stdout
        # The check validates pii's parameters with the detectors' types and regions, so it reruns too (in
        # seconds, its output unchanged: nothing below it reruns for it).
        assert _ran(out) == {"check", "pii"}, out
        assert _outs(repo) == before
    finally:
        module.write_text(original)
        _run(["dvc", "repro"], repo)


@pytest.mark.slow
def test_a_changed_topic_count_reruns_the_domains_and_what_reads_them(demo):
    """domains.topics.k is the domains stage's: a new count reruns it and the stages reading its output (tokenize,
    whose shards come out byte-identical while buckets do not name topics, so no training run reruns; the mixture,
    for the tags; the lineage and the report), and nothing upstream: not the embeddings, not decontaminate."""
    repo, _, _ = demo
    before = _outs(repo)
    params = repo / "params.yaml"
    original = params.read_text()
    try:
        changed = yaml.safe_load(original)
        changed["domains"]["topics"]["k"] = 5
        params.write_text(yaml.safe_dump(changed, sort_keys=False))
        out = _run(["dvc", "repro"], repo).stdout
        # the anneal reads the tags as the mixture does; its arms' plans come out the same, so they are resumed at
        # their last step and its output does not move (below)
        assert _ran(out) == {"check", "domains", "tokenize", "mixture", "anneal", "lineage", "report"}, out
        after = _outs(repo)
        moved = {p for p in before if after[p] != before[p]}
        assert {"data/domains", "metrics/domains.json"} <= moved, moved
        assert not {p for p in moved if p.startswith(("data/", "dvclive", "metrics/train"))} - {"data/domains"}, moved
        con = lineage.connect(repo / "lineage" / lineage.DB_NAME)
        assert con.execute("SELECT count(*) FROM topics").fetchone()[0] == 5
        con.close()
    finally:
        params.write_text(original)
        _run(["dvc", "repro"], repo)
    assert _outs(repo) == before


def _stale(repo: Path) -> set[str]:
    """The stages `dvc status` finds changed (their deps, params or outputs)."""
    return set(json.loads(_run(["dvc", "status", "--json"], repo).stdout or "{}"))


@pytest.mark.slow
def test_an_edit_to_one_sections_schema_stales_only_its_stage(demo):
    """Each stage depends on its own package's schema and the base (tokenmill.section), not on every section's:
    an edit to dedup's schema file leaves every other data stage up to date in `dvc status` — only dedup (whose
    output the stages below read) and the whole-configuration check (in seconds; its output unchanged, so
    nothing below it reruns for it). When every stage depended on one params.py, all 19 became stale."""
    repo, _, _ = demo
    before = _stale(repo)
    schema = repo / "src" / "tokenmill" / "dedup" / "params.py"
    original = schema.read_text()
    try:
        schema.write_text(original + "\n# an edit to dedup's schema\n")
        assert _stale(repo) - before == {"check", "dedup"}
        base = repo / "src" / "tokenmill" / "section.py"  # the base is every stage's
        schema.write_text(original)
        base_original = base.read_text()
        base.write_text(base_original + "\n# an edit to the base\n")
        try:
            assert {"check", "dedup", "mixture", "pretrain", "report"} <= _stale(repo) - before
        finally:
            base.write_text(base_original)
    finally:
        schema.write_text(original)
    assert _stale(repo) == before

@pytest.mark.slow
def test_lineage_stage_fails_when_a_document_goes_missing(demo, tmp_path):
    """A pipeline that lost a document must not look finished: the lineage stage exits non-zero naming it.
    Run on a copy of the demo's data in which one of pii's decision rows was removed, as a buggy stage would."""
    import pyarrow.parquet as pq

    repo, _, _ = demo
    (tmp_path / "data").mkdir()
    for stage in (repo / "data").iterdir():
        if stage.name == "pii":
            shutil.copytree(stage, tmp_path / "data" / "pii")
        else:
            (tmp_path / "data" / stage.name).symlink_to(stage)
    shutil.copy(repo / "params.yaml", tmp_path / "params.yaml")
    shard = sorted((tmp_path / "data" / "pii" / "decisions").glob("*.parquet"))[0]
    table = pq.read_table(shard)
    victim = table.column("doc_id")[0].as_py()
    pq.write_table(table.slice(1), shard)

    proc = _run([sys.executable, str(repo / "stages" / "lineage.py"), "tokenize", "mixture"], tmp_path, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert victim in proc.stderr and " 0 conservation problem(s)" not in proc.stdout, proc.stderr


# Every data stage's output hash in dvc.lock when this test's configuration is built: a build is a function of
# parameters, inputs and code, so any clean build anywhere gives these. Recorded from a fresh-clone build of
# 867a1d4, before the stage scripts took over the StageRun from the library functions (a change meant to keep
# every output); tokenize and mixture rewritten when they began to plant canaries (tokenmill.canaries), the
# mixture's metrics when they gained the distinct documents per bucket, every other stage's hash as recorded. A
# change meant to change an output rewrites the file: TOKENMILL_E2E_WRITE_HASHES=1.
DATA_HASHES = Path(__file__).with_name("e2e_data_hashes.json")


def test_data_stages_build_the_recorded_hashes(demo):
    """Every data stage's output (and its metrics) is byte-identical to the recorded build: the build is
    deterministic across clones, folders and time, and no refactoring changed what a stage writes."""
    _, _, lock = demo
    data = DATA_STAGES + ["mixture"]
    built = {s: {o["path"]: o["md5"] for o in st["outs"]}
             for s, st in yaml.safe_load(lock)["stages"].items() if s in data}
    if os.environ.get("TOKENMILL_E2E_WRITE_HASHES"):
        DATA_HASHES.write_text(json.dumps(built, indent=2) + "\n")
    recorded = json.loads(DATA_HASHES.read_text())
    assert set(built) == set(recorded) == set(data)
    changed = [f"{s}: {path}" for s in data for path in recorded[s] if built[s].get(path) != recorded[s][path]]
    assert not changed, f"outputs differ from tests/{DATA_HASHES.name}: {changed}"


@pytest.mark.slow
def test_real_crawl_preset_runs_as_shipped(demo):
    """README's "Pointing it at real data" as a queued experiment: real WARC, WET and JSONL files put under
    data/raw/, passed to the queue's temporary copy with --copy-paths (they stay out of git), and
    `-S source=crawl` — no other edit — reach the lineage, each format's documents in it. The queue runs from a
    copy of the repository, so everything a stage reads must be tracked. Runs last: it leaves the workspace on
    the crawl."""
    repo, _, _ = demo
    # Enough crawl for the test's 300k-token plan within the epoch cap (3 files planned 4.3 epochs of web/high).
    files = {"warc": [SHARED / "warc" / f for f in ("dolma_sample-0000.warc.gz", "dolma_sample-0001.warc.gz",
                                                     "resiliparse_warcfile.warc.gz", "ukwa_wikipedia_mona_lisa.warc.gz",
                                                     "ukwa_govuk_BL-20140325121225068.warc.gz")],
             "wet": [SHARED / "warc" / "cc_whirlwind" / "whirlwind.warc.wet.gz"],
             "jsonl": sorted((SHARED / "cc_jsonl").glob("*.jsonl.gz"))}
    for kind, paths in files.items():
        (repo / "data" / "raw" / kind).mkdir(parents=True, exist_ok=True)
        for path in paths:
            shutil.copy(path, repo / "data" / "raw" / kind / path.name)
    copy = [arg for kind in files for arg in ("-C", f"data/raw/{kind}")]
    _run(["dvc", "exp", "run", "--queue", "-n", "crawl", *copy, "-S", "source=crawl", "lineage"], repo)
    _run(["dvc", "queue", "start", "-j", "1"], repo)
    deadline = time.time() + 900
    while time.time() < deadline:
        status = _run(["dvc", "queue", "status"], repo).stdout
        if not any(word in status for word in ("Queued", "Running")):
            break
        time.sleep(5)  # each poll is a DVC start-up (0.7 CPU-s)
    log = _run(["dvc", "queue", "logs", "crawl"], repo, check=False).stdout
    _run(["dvc", "queue", "stop"], repo, check=False)
    assert "Failed" not in status and "Success" in status, log + status
    assert {"check", "ingest", "mixture", "lineage"} <= _ran(log), log
    # The presets weight code and reference, which a crawl lacks: one line says so, and the plan goes on.
    assert "check: warning: mixture: no source fills code, legal, reference" in log
    assert "No file hash info" not in log and "Traceback" not in log
    # The experiment's outputs, brought into the workspace from DVC's cache.
    applied = _run(["dvc", "exp", "apply", "crawl"], repo)
    assert yaml.safe_load((repo / "params.yaml").read_text())["sources"].keys() == \
        {"crawl_warc", "crawl_wet", "crawl_arc", "crawl_jsonl"}, applied.stdout + applied.stderr

    con = lineage.connect(repo / "lineage" / lineage.DB_NAME)
    documents = dict(con.execute("SELECT source, count(*) FROM documents GROUP BY source").fetchall())
    planned = dict(con.execute("""SELECT d.source, count(DISTINCT p.doc_id) FROM plan p JOIN documents d
                                  USING (doc_id) GROUP BY d.source""").fetchall())
    assert set(documents) == {"crawl_warc", "crawl_wet", "crawl_jsonl"}, documents
    assert planned.get("crawl_warc", 0) > 0 and planned.get("crawl_jsonl", 0) > 0, planned
    files_read = dict(con.execute("SELECT source, files FROM sources").fetchall())
    assert files_read == {"crawl_warc": 5, "crawl_wet": 1, "crawl_arc": 0, "crawl_jsonl": 3}, files_read
    con.close()
    # The demo's training runs are still in data/train, trained on the demo's plan: the audit says so instead
    # of failing the crawl's lineage on them (and `dvc repro` would retrain them).
    verify = _run(["tokenmill", "audit", "verify"], repo).stdout
    assert "conservation holds" in verify and "trained on an earlier plan" in verify and "pretrain" in verify


def test_a_clone_never_built_checks_out_without_warnings(tmp_path):
    """dvc.lock is committed (the hashes of the last `make demo`), so every stage output has hash info and
    DVC's checkout before a first `dvc exp run`, in a clone where nothing was ever built, has nothing to say:
    the cache is empty and the outputs are simply built. Without the lock it warns "No file hash info found
    for '<out>'. It won't be created." once per output (dvc_data; treeverse/dvc#11005). A stage added to
    dvc.yaml without rebuilding and committing the lock fails here."""
    for name in ("dvc.yaml", "dvc.lock", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    _run(["git", "init", "-q"], tmp_path)
    _run(["dvc", "init", "-q"], tmp_path)
    proc = _run(["dvc", "checkout", "--allow-missing"], tmp_path)  # what `dvc exp run` does before it runs
    assert proc.stdout + proc.stderr == "", proc.stdout + proc.stderr


def test_the_committed_lock_is_the_build_of_the_committed_code():
    """`dvc status` here (in CI: a fresh clone, nothing built) finds no stage whose code, parameters or command
    changed since dvc.lock was written, and no committed metric or plot that differs from the lock: the numbers a
    user reads in the repository are the ones the code produces. Outputs not built or not in the cache (every
    DVC-cached output of a fresh clone) are not changes of the code. A commit that changes a stage's code or
    parameters without rebuilding the demo (`make demo`) and committing its lock, metrics and plots fails here."""
    import dvc.api  # noqa: F401  (DVC must be installed: the project's own dependency)

    status = json.loads(_run(["dvc", "status", "--json"], ROOT).stdout or "{}")
    stages = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]
    built = [o["path"] for s in stages.values() for o in s.get("outs", [])]  # every stage's outputs

    def is_output(path: str) -> bool:
        """A stage's output, a file inside one, or a folder holding outputs (data/train holds every run's)."""
        return any(path == o or path.startswith(o.rstrip("/") + "/") or o.startswith(path.rstrip("/") + "/")
                   for o in built)

    stale = []
    for stage, changes in status.items():
        for change in changes:
            if not isinstance(change, dict):
                stale.append(f"{stage}: {change}")  # "changed command", "always changed"
                continue
            for kind, paths in change.items():
                for path, what in (paths.items() if isinstance(paths, dict) else [(paths, "changed")]):
                    if what in ("not in cache", "deleted") or (kind == "changed deps" and is_output(path)):
                        continue  # an output not built here, or built differently in this workspace
                    stale.append(f"{stage}: {kind}: {path}: {what}")
    assert not stale, "dvc.lock is not the build of this code (run `make demo` and commit dvc.lock, metrics/, " \
                      "plots/ and dvclive/):\n" + "\n".join(stale)
