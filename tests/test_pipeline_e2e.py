"""The demo DAG end to end, driven through dvc in a temporary copy of the project.

One test on purpose: it builds a small embedded corpus, runs `dvc repro`, checks that every planted case
the ingest stage is responsible for ends with the fate its ground truth says, that the audit CLI explains
them, and that DVC reruns only what a parameter change reaches.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tokenmill import lineage
from tokenmill.config import compose

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(args, cwd, check=True):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1",
           "TOKENMILL_PROGRESS": "0"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


# Ground-truth reasons that name a class of page rather than one rule: any rule of the stage may catch it.
GENERIC_REASONS = {"spam", "boilerplate"}


def _check_planted_cases(con, cases, stages) -> set[str]:
    """Every planted case has, at every stage that ran, the decision its ground truth expects."""
    checked, reached = set(), {"exact_duplicate": [], "near_duplicate": []}
    for case in cases:
        ids = [r[0] for r in con.execute(
            "SELECT doc_id FROM records WHERE url = ? AND record_type NOT IN ('request', 'warcinfo', 'metadata')",
            [case["url"]]).fetchall()]
        assert len(ids) == 1, (case, ids)
        decisions = dict((stage, (action, reason)) for stage, action, reason in con.execute(
            "SELECT stage, action, reason FROM decisions WHERE doc_id = ?", ids).fetchall())
        if "of_url" in case and case["expect"].get("dedup", "").startswith("drop:") and "dedup" in stages:
            reached[case["case"]].append(_check_duplicate_pair(con, case))
            checked.add(case["case"])
            continue
        for stage, expected in case["expect"].items():
            if stage not in stages:
                continue
            dropped_before = [s for s, (a, _) in decisions.items() if a == "drop" and stages.index(s) < stages.index(stage)]
            if dropped_before and expected.split(":", 1)[-1] in GENERIC_REASONS:
                # Main-content extraction can leave nothing of a boilerplate page: caught earlier, still caught.
                checked.add(case["case"])
                continue
            if dropped_before and expected == "keep" and stage != "ingest":
                # A negative control ("this stage must not drop it") holds trivially when it never got there.
                continue
            assert stage in decisions, (case, "never reached", stage, decisions)
            action, reason = decisions[stage]
            if expected in ("keep", "modify"):
                assert action == expected or (expected == "keep" and action == "modify"), (case, decisions)
            else:
                want = expected.split(":", 1)[1]
                assert action == "drop", (case, decisions)
                assert want in GENERIC_REASONS or reason == want, (case, decisions)
            checked.add(case["case"])
    for kind, got in reached.items():
        assert sum(got) >= max(1, len(got) / 2), (kind, "too few planted pairs reached dedup", got)
    return checked


def _check_duplicate_pair(con, case):
    """Dedup keeps one of a duplicate pair by its own rule (not necessarily the original): exactly one of
    the two goes, with the expected reason, naming the other as what it duplicates."""
    reason = case["expect"]["dedup"].split(":", 1)[1]
    pair = {}
    for url in (case["url"], case["of_url"]):
        pair[url] = con.execute("""SELECT r.doc_id, d.action, d.reason, d.details FROM records r
            JOIN decisions d ON d.doc_id = r.doc_id AND d.stage = 'dedup'
            WHERE r.url = ? AND r.record_type = 'response'""", [url]).fetchone()
    if pair[case["url"]] is None and pair[case["of_url"]] is None:
        # Both dropped before dedup (identical texts meet identical fates; near copies nearly always do):
        # neither reaches training. The caller requires most planted pairs to reach dedup.
        fates = [con.execute("SELECT dropped_at, drop_reason FROM documents WHERE url = ? AND record_type = 'response'",
                             [u]).fetchone() for u in (case["url"], case["of_url"])]
        assert all(f[0] is not None for f in fates), (case, fates)
        if case["case"] == "exact_duplicate":
            assert fates[0] == fates[1], (case, fates)
        return False
    assert None not in pair.values(), (case, pair, "only one of the pair reached dedup")
    dropped = [v for v in pair.values() if v[1] == "drop"]
    assert len(dropped) == 1 and dropped[0][2] == reason, (case, pair)
    other = next(v for v in pair.values() if v[1] != "drop")
    assert json.loads(dropped[0][3])["duplicate_of"] == other[0], (case, pair)
    return True


def _check_step_tokens(con, token_dir, step):
    per_step, rows = lineage.step_spans(con, step)
    plan = con.execute("SELECT shard, \"offset\", length FROM plan ORDER BY position").fetchall()
    stream = np.concatenate([np.fromfile(token_dir / shard, dtype=np.uint16)[off: off + n + 1]
                             for shard, off, n in plan])
    spans = np.concatenate([np.fromfile(token_dir / r[5], dtype=np.uint16)[r[6] + r[7]: r[6] + r[8]] for r in rows])
    assert len(spans) == per_step
    assert np.array_equal(spans, stream[step * per_step:(step + 1) * per_step])
    eos = json.loads((token_dir / "manifest.json").read_text())["eos_id"]
    assert (stream == eos).sum() == len(plan)  # exactly one end-of-text per planned document


# The demo at test size. Written into the copy's conf/config.yaml (not passed as overrides) so that
# `dvc exp run`, which recomposes params.yaml from conf/, composes the same small configuration.
TEST_SIZE = """
sample: {n_docs: 800, eval_items: 40, planted_eval_items: 8}
tokenizer: {vocab_size: 2000}
train: {token_budget: 300000}
"""
GIT = ["git", "-c", "user.name=tokenmill-test", "-c", "user.email=test@tokenmill.invalid"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("demo") / "repo"
    repo.mkdir()
    for item in ("dvc.yaml", "conf", "stages", "src", "data/raw/README.md"):
        (repo / item).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / item).is_dir():
            shutil.copytree(ROOT / item, repo / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / item, repo / item)
    with open(repo / "conf" / "config.yaml", "a") as f:
        f.write(TEST_SIZE)
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["dvc", "config", "hydra.enabled", "True"], repo)
    compose([], conf_dir=repo / "conf", output=repo / "params.yaml")
    out = _run(["dvc", "repro"], repo).stdout
    return repo, out


@pytest.mark.slow
def test_demo_dag(demo):
    repo, out = demo
    for stage in ("sample", "ingest", "filter", "pii", "dedup", "quality", "decontaminate", "tokenizer", "tokenize",
                  "mixture", "lineage"):
        assert f"Running stage '{stage}'" in out
    verify = _run(["tokenmill", "audit", "verify"], repo)
    assert "conservation holds" in verify.stdout

    truth = json.loads((repo / "data" / "sample" / "ground_truth.json").read_text())
    con = lineage.connect(repo / "lineage" / lineage.DB_NAME)
    stages = [r[0] for r in con.execute("SELECT stage FROM stage_runs ORDER BY stage_order").fetchall()]
    checked = _check_planted_cases(con, truth["cases"], stages)
    assert {"truncated_record", "non_utf8", "non_english", "spam", "boilerplate", "pii", "exact_duplicate",
            "near_duplicate", "contaminated"} <= checked

    # Every planted benchmark item is in the contamination table, against the page it was planted in.
    contaminated = {(url, item) for url, item in con.execute("""SELECT r.url, c.item_id FROM contamination c
        JOIN records r USING (doc_id) WHERE c.contaminated""").fetchall()}
    for case in (c for c in truth["cases"] if c["case"] == "contaminated"):
        assert (case["url"], case["eval_item"]) in contaminated, case

    # Non-UTF-8 pages are decoded with their declared charset: the extracted text holds the snippet.
    docs = con.execute("SELECT url, text, charset FROM read_parquet(?)",
                       [str(repo / "data" / "ingest" / "documents" / "*.parquet")]).fetchall()
    text_of = {url: (text, charset) for url, text, charset in docs}
    for case in (c for c in truth["cases"] if c["case"] == "non_utf8"):
        text, charset = text_of[case["url"]]
        assert case["snippet"] in text, (case, charset)

    # Planted personal data is gone after the pii stage; Luhn-invalid card-like numbers are left alone.
    pii_text = dict(con.execute("SELECT url, text FROM read_parquet(?)",
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
    near = next(c for c in truth["cases"] if c["case"] == "near_duplicate" and c["expect"])
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
    shown = _run(["tokenmill", "audit", "step", "3"], repo).stdout
    assert "step 3: tokens" in shown
    assert _run(["tokenmill", "audit", "step", "99999999"], repo, check=False).returncode == 1
    con.close()

    # Unchanged pipeline: nothing reruns.
    assert "Data and pipelines are up to date" in _run(["dvc", "repro"], repo).stdout


@pytest.mark.slow
def test_mixture_experiments(demo):
    """`dvc exp run -S mixture=<preset>` reruns only what the mixture reaches; queued presets run from a
    temporary copy (so everything a stage reads must be tracked); `dvc exp show` lists them side by side."""
    repo, _ = demo
    _run(["git", "add", "-A"], repo)
    _run([*GIT, "commit", "-qm", "demo baseline"], repo)

    out = _run(["dvc", "exp", "run", "-n", "code-heavy", "-S", "mixture=code_heavy"], repo).stdout
    ran = {s for s in ("sample", "ingest", "filter", "pii", "dedup", "quality", "decontaminate", "tokenizer",
                       "tokenize", "mixture", "lineage") if f"Running stage '{s}'" in out}
    assert ran == {"tokenizer", "tokenize", "mixture", "lineage"}, out
    assert yaml.safe_load((repo / "params.yaml").read_text())["mixture"]["name"] == "code_heavy"

    for preset in ("web_heavy", "balanced"):
        _run(["dvc", "exp", "run", "--queue", "-n", preset.replace("_", "-"), "-S", f"mixture={preset}"], repo)
    _run(["dvc", "queue", "start", "-j", "1"], repo)
    deadline = time.time() + 600
    while time.time() < deadline:
        status = _run(["dvc", "queue", "status"], repo).stdout
        if not any(word in status for word in ("Queued", "Running")):
            break
        time.sleep(3)
    assert "Failed" not in status, _run(["dvc", "queue", "logs", "web-heavy"], repo, check=False).stdout + status
    _run(["dvc", "queue", "stop"], repo, check=False)

    shown = json.loads(_run(["dvc", "exp", "show", "--json"], repo).stdout)
    rows = {}
    for commit in shown:
        for exp in commit.get("experiments") or []:
            for rev in exp["revs"]:
                data = rev["data"]
                name = data["params"]["params.yaml"]["data"]["mixture"]["name"]
                metrics = data["metrics"]["metrics/mixture.json"]["data"]
                rows[rev.get("name") or name] = (name, metrics["plan_tokens"], metrics["buckets"])
    names = {v[0] for v in rows.values()}
    assert {"code_heavy", "web_heavy", "balanced"} <= names, rows
    code = next(v for v in rows.values() if v[0] == "code_heavy")[2]
    web = next(v for v in rows.values() if v[0] == "web_heavy")[2]
    assert code["code:bulk"]["planned_tokens"] > web["code:bulk"]["planned_tokens"]
