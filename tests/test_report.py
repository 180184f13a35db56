"""The report, built from a real tiny pipeline run (tests/tiny_run.py) and opened in a real headless browser;
missing inputs give "not run" sections; every SQL query of docs/audit.md runs on the run's lineage.

The browser is Debian's chromium (`apt-get install -y chromium`), driven through the Chrome DevTools
protocol over a pipe (--remote-debugging-pipe: JSON messages ending in NUL on file descriptors 3 and 4), so
no driver package is needed. Without chromium the browser test is skipped, and fails under any non-empty CI
value (CI systems set true, 1, yes ...).
"""

import base64
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tiny_run
from tokenmill import lineage
from tokenmill.report import build_report

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["funnel", "languages", "quality", "duplicates", "domains", "mixture", "contamination", "training", "canaries", "scaling",
            "evaluation", "signal_noise", "anneal", "context"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_run.build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def report(tiny):
    """What the report stage wrote (stages/report.py, run by `dvc repro report`)."""
    out = tiny / "reports"
    return out, json.loads((out / "report.json").read_text())


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):  # any CI value
            pytest.fail("chromium is not installed (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return found


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("1", pytest.fail.Exception),
                                         ("yes", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_chromium_fails_under_any_ci_value(monkeypatch, ci, outcome):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", ci)
    try:  # caught by hand: a skip escaping here would skip this test instead of failing it
        _chromium()
        got = None
    except (pytest.fail.Exception, pytest.skip.Exception) as exc:
        got = exc
    assert type(got) is outcome and "chromium is not installed" in str(got), repr(got)


def _to_3_and_4(read_fd: int, write_fd: int) -> None:
    # In the child before exec: DevTools reads commands on fd 3 and writes replies on fd 4. Copies above 4
    # first, so that placing one never overwrites the other.
    r, w = fcntl.fcntl(read_fd, fcntl.F_DUPFD, 5), fcntl.fcntl(write_fd, fcntl.F_DUPFD, 5)
    os.dup2(r, 3)
    os.dup2(w, 4)


class Chromium:
    """Headless chromium and one page, over the DevTools pipe."""

    def __init__(self, binary: str, profile: Path):
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        # --no-sandbox: the test may run as root (containers, CI), where chromium refuses its sandbox.
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            pass_fds=(3, 4), preexec_fn=lambda: _to_3_and_4(cmd_r, out_w))
        os.close(cmd_r)
        os.close(out_w)
        self.w, self.r = os.fdopen(cmd_w, "wb", buffering=0), os.fdopen(out_r, "rb", buffering=0)
        self.buf, self.next_id, self.pending = b"", 0, []

    def _message(self) -> dict:
        while b"\0" not in self.buf:
            chunk = self.r.read(1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium closed the DevTools pipe: {self.proc.stderr.read().decode()[-2000:]}")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.w.write(json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.pending.append(reply)

    def wait_for(self, event: str, session: str) -> dict:
        for i, e in enumerate(self.pending):
            if e.get("method") == event and e.get("sessionId") == session:
                return self.pending.pop(i)
        while True:
            e = self._message()
            if e.get("method") == event and e.get("sessionId") == session:
                return e
            self.pending.append(e)

    def open(self, url: str, width: int = 1280, height: int = 900) -> str:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)  # after every <img> has loaded or failed
        return session

    def evaluate(self, expression: str, session: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        return result["result"]["value"]

    def close(self) -> None:
        try:
            self.send("Browser.close")
            self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.slow  # drives dvc through the tiny pipeline (tests/tiny_run.py)
def test_report_opens_in_a_browser_with_every_plot(report, tmp_path):
    out, summary = report
    assert summary["sections"] == {k: "ok" for k in SECTIONS}, summary["not_run"]
    browser = Chromium(_chromium(), tmp_path / "profile")
    try:
        page = browser.open((out / "index.html").resolve().as_uri())
        images = browser.evaluate("Array.from(document.images, i => ({src: i.getAttribute('src'), "
                                  "complete: i.complete, width: i.naturalWidth, height: i.naturalHeight}))", page)
        headings = browser.evaluate("Array.from(document.querySelectorAll('h2'), h => h.textContent)", page)
        not_run = browser.evaluate("document.querySelectorAll('.notrun').length", page)
        shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                            session=page)
    finally:
        browser.close()
    # Every plot the report wrote is on the page and was decoded by the browser.
    assert sorted(i["src"] for i in images) == summary["images"]
    assert all(i["complete"] and i["width"] > 0 and i["height"] > 0 for i in images), images
    # Training curves of every run: the three scouts and the full run.
    assert {"plots/train_pretrain.png", "plots/train_scout_s1.png", "plots/train_scout_s2.png",
            "plots/train_scout_s3.png", "plots/scaling.png", "plots/funnel.png"} <= set(summary["images"])
    assert len(headings) == len(SECTIONS) and not_run == 0
    png = base64.b64decode(shot["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    height = int.from_bytes(png[20:24], "big")  # IHDR: the full page, far taller than one screen
    assert height > 3000, height
    keep = os.environ.get("TOKENMILL_REPORT_SCREENSHOT")  # to look at it: set to a file path
    (Path(keep) if keep else tmp_path / "report.png").write_bytes(png)


@pytest.mark.slow  # drives dvc through the tiny pipeline (tests/tiny_run.py)
def test_report_tables_hold_the_runs_numbers(tiny, report):
    out, summary = report
    page = (out / "index.html").read_text()
    con = lineage.connect(tiny / "lineage" / lineage.DB_NAME)
    try:
        # The funnel: every stage with its documents in and out, as the lineage says.
        for stage, n_in, n_out in con.execute("SELECT stage, documents_in, documents_out FROM stages "
                                              "WHERE stage_order IS NOT NULL").fetchall():
            assert re.search(rf"<td class=\"txt\">{stage}</td><td class=\"num\">{n_in:,}</td>"
                             rf"<td class=\"num\">{n_out:,}</td>", page), stage
        dirty = con.execute("SELECT count(DISTINCT item_id) FROM contamination WHERE contaminated "
                            "AND benchmark = 'tokenmill_heldout'").fetchone()[0]
        real = con.execute("SELECT count(DISTINCT benchmark) FROM contamination c JOIN benchmarks USING (benchmark) "
                           "WHERE c.contaminated").fetchone()[0]
        skipped = con.execute("SELECT count(*) FROM train_steps WHERE run = 'pretrain' AND skipped").fetchone()[0]
    finally:
        con.close()
    assert dirty > 0 and f'<td class="txt">tokenmill_heldout</td><td class="num">{dirty}</td>' in page
    assert real >= 6  # real benchmark items planted in the crawl were caught (11 planted, one per benchmark)
    # Spikes: the tiny full run skips a few updates; each is listed.
    if skipped:
        assert "Spikes of pretrain" in page
    # The evaluation: every scored benchmark with its all and clean columns, from results.json.
    results = json.loads((tiny / "data" / "evaluate" / "results.json").read_text())
    for name, b in results["benchmarks"].items():
        if "metrics" in b:
            acc = b["metrics"]["acc"]
            assert f"{acc['all']:.4f} ± {acc['all_stderr']:.4f}" in page
            assert f"{acc['clean']:.4f} ± {acc['clean_stderr']:.4f}" in page
            assert f'<td class="num">{b["dirty_items"]}</td>' in page
    for bucket in results["heldout"]["buckets"]:
        assert f'<td class="txt">{bucket}</td>' in page
    # Real benchmarks with their origin and licence, the non-commercial one marked.
    assert "CC-BY-NC-3.0 (non-commercial)" in page and "allenai/ai2_arc ARC-Easy, validation" in page
    # Signal and noise over the ladder: the runs' values ± σ and the decision metric the evaluate stage chose.
    metrics = json.loads((tiny / "metrics" / "evaluate.json").read_text())
    decision = metrics["decision_metric"]
    assert decision in metrics["ladder"] and f'<td class="txt">{decision} (decision)</td>' in page
    for metric, row in metrics["ladder"].items():
        assert f'<td class="txt">{metric}' in page and row["signal"] >= 0
        # A continuous metric always moves between evaluations; accuracy over a few items may not (no SNR then).
        if metric.endswith(("bpb", "prob_norm")) or metric == "heldout_mean":
            assert row["noise"] > 0, metric
        else:
            assert row["noise"] > 0 or (row["noise"] == 0 and row["snr"] is None), metric
    # The forecast against the actual full run.
    cmp = summary["forecast_comparison"]
    assert cmp["compute_as_predicted"] and f"{cmp['actual_loss']:.4g}" in page
    # The demo's record of earlier full runs is of another ladder: the page says the law's forecast stands, and why.
    assert "record of earlier full runs" in page and "not applied: benchmarks/decision/forecast_record.json" in page


@pytest.mark.slow  # drives dvc through the tiny pipeline (tests/tiny_run.py)
def check_canary_section(project, out, summary, sets: int) -> None:
    """The report's canaries section: per run and planned visit count, the mean exposure of the runs' own
    canaries.parquet files (read here with pyarrow, not through the lineage), and its plot."""
    page = (out / "index.html").read_text()
    assert summary["sections"]["canaries"] == "ok" and (out / "plots" / "canaries.png").stat().st_size > 5000
    runs = sorted((project / "data" / "train").rglob("canaries.parquet"))
    assert runs
    for f in runs:
        run = json.loads((f.parent / "manifest.json").read_text())["stage"]
        rows = pq.read_table(f).to_pylist()
        for v in {r["planned_visits"] for r in rows}:
            mine = [r for r in rows if r["planned_visits"] == v]
            assert len(mine) == sets
            mean = sum(r["exposure"] for r in mine) / sets
            assert f'<td class="txt">{run}</td><td class="num">{v}</td><td class="num">{sets}</td>' in page
            assert f">{mean:.4g}<" in page, (run, v)


def test_report_plots_each_runs_canary_exposure_against_its_visits(tiny, report):
    """The tiny run's canaries are unplanted controls (tests/tiny_run.py); the e2e demo's are planted
    (tests/test_pipeline_e2e.py::test_demo_dag checks the same section there)."""
    out, summary = report
    check_canary_section(tiny, out, summary, sets=2)


def test_report_shows_each_topic_with_its_share_of_the_plan(tiny, report):
    """The domains section: every topic of the lineage's `topics` table by its name and size, the share of the
    planned tokens it holds (summing to 1 over the topics), and toxicity per source bucket and format."""
    out, summary = report
    assert summary["sections"]["domains"] == "ok" and (out / "plots" / "domains.png").stat().st_size > 5000
    con = lineage.connect(tiny / "lineage" / lineage.DB_NAME, extra=lineage.audit_tables(tiny))
    topics = con.execute("SELECT topic, name, documents FROM topics ORDER BY topic").fetchall()
    shares = dict(con.execute("""SELECT d.topic, sum(p.length) / (SELECT sum(length) FROM plan p2
                                     JOIN documents d2 USING (doc_id) WHERE d2.topic IS NOT NULL)
                                 FROM plan p JOIN documents d USING (doc_id) WHERE d.topic IS NOT NULL
                                 GROUP BY ALL""").fetchall())
    con.close()
    page = (out / "index.html").read_text()
    assert len(topics) == 12 and abs(sum(shares.values()) - 1) < 1e-9
    for topic, name, documents in topics:
        row = f'<td class="txt">{topic}</td><td class="txt">{name}</td><td class="num">{documents:,}</td>'
        assert row in page, topic
        assert f'{row}<td class="num">{shares.get(topic, 0):.4g}</td>' in page, topic
    assert "toxicity-tagged" in page


def test_report_shows_the_format_mix_each_stage_kept_and_dropped(tiny, report):
    """Every document with text carries a topic, a format and a score in the lineage (a document dropped before
    the domains stage: labelled_by 'nearest topic'); the report's format mix per stage matches what each stage's
    own decisions and the domains stage's two label files give, counted here without the lineage."""
    out, _ = report
    con = lineage.connect(tiny / "lineage" / lineage.DB_NAME)
    unlabelled = con.execute("""SELECT dropped_at, labelled_by, count(*) FROM documents
                                WHERE topic IS NULL OR format IS NULL OR toxicity IS NULL GROUP BY ALL""").fetchall()
    by = set(con.execute("""SELECT dropped_at IS NULL OR dropped_at = 'domains', labelled_by FROM documents
                            WHERE labelled_by IS NOT NULL GROUP BY ALL""").fetchall())
    con.close()
    assert all(stage == "ingest" and how is None for stage, how, _ in unlabelled), unlabelled  # no text, no label
    assert by == {(True, "clustered"), (False, "nearest topic")}, by
    data = tiny / "data"
    fmt = {r["doc_id"]: r["format"] for r in pq.read_table(data / "domains/dropped_before.parquet").to_pylist()}
    for path in (data / "domains/decisions").glob("*.parquet"):
        fmt.update((r["doc_id"], json.loads(r["details"])["format"]) for r in pq.read_table(path).to_pylist())
    page = (out / "index.html").read_text()
    assert "The format mix each stage kept and dropped" in page and "The topic mix each stage kept and dropped" in page
    formats = sorted(set(fmt.values()))
    checked = 0
    for stage in ("filter", "pii", "dedup", "quality", "decontaminate", "domains"):
        rows = [r for p in (data / stage / "decisions").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
        for what, mine in (("kept", [r for r in rows if r["action"] != "drop"]),
                           ("dropped", [r for r in rows if r["action"] == "drop"])):
            if not mine:
                continue
            counts = Counter(fmt[r["doc_id"]] for r in mine)
            cells = "".join(f'<td class="num">{fmt_cell(counts[f] / len(mine))}</td>' for f in formats)
            row = (f'<td class="txt">{stage}</td><td class="txt">{what}</td><td class="num">{len(mine):,}</td>'
                   f'<td class="num">0</td>{cells}')
            assert row in page, (stage, what, row)
            checked += 1
    assert checked >= 8, checked  # the tiny run drops at five of those stages at least


def fmt_cell(share: float) -> str:
    return "0" if share == 0 else f"{share:.4g}" if share >= 1e-3 else f"{share:.3e}"


def test_missing_inputs_say_not_run(tiny, tmp_path):
    """A project whose lineage exists but nothing after it: no training runs, no forecast, no evaluation."""
    bare = tmp_path / "bare"
    (bare / "lineage").mkdir(parents=True)
    shutil.copy(tiny / "lineage" / lineage.DB_NAME, bare / "lineage" / lineage.DB_NAME)
    forecast = bare / "data" / "forecast" / "prediction.json"
    summary = build_report(bare, bare / "reports", forecast=forecast,
                           evaluation=bare / "data" / "evaluate" / "results.json")
    assert {k for k, v in summary["sections"].items() if v == "not run"} == {"training", "canaries", "scaling",
                                                                             "evaluation", "signal_noise", "anneal",
                                                                             "context"}
    page = (bare / "reports" / "index.html").read_text()
    assert "Not run: no evaluation results at" in page and "the evaluate stage has not run" in page
    assert "Not run: no forecast at" in page and "Not run: no training run has finished" in page
    assert summary["forecast_comparison"] is None
    # The forecast without the full run: the prediction is shown, the actual loss is not yet there.
    shutil.copytree(tiny / "data" / "forecast", bare / "data" / "forecast")
    summary = build_report(bare, bare / "reports", forecast=forecast)
    assert summary["sections"]["scaling"] == "ok" and summary["forecast_comparison"] is None
    assert "not run: the full run has not finished" in (bare / "reports" / "index.html").read_text()
    # A full run whose held-out buckets are not the scouts': its loss is not comparable, which the report says.
    actual = json.loads((tiny / "data" / "train" / "pretrain" / "summary.json").read_text())
    (bare / "data" / "train" / "pretrain").mkdir(parents=True)
    (bare / "data" / "train" / "pretrain" / "summary.json").write_text(json.dumps({**actual,
                                                                                 "heldout_loss": {"code": 5.0}}))
    build_report(bare, bare / "reports", forecast=forecast)
    assert "not comparable: actual run: held-out buckets [&#x27;code&#x27;] are not the scouts&#x27;" in \
        (bare / "reports" / "index.html").read_text()
    # A damaged input file is an error that names it.
    (bare / "data" / "evaluate").mkdir(parents=True)
    (bare / "data" / "evaluate" / "results.json").write_text('{"benchmarks": {')
    with pytest.raises(ValueError, match=r"evaluate/results.json is not valid JSON"):
        build_report(bare, bare / "reports", evaluation=bare / "data" / "evaluate" / "results.json")
    with pytest.raises(FileNotFoundError, match="no lineage database at"):
        build_report(tmp_path / "nothing", tmp_path / "nothing" / "reports")


def _audit_queries() -> list[str]:
    text = (ROOT / "docs" / "audit.md").read_text()
    out = []
    for block in re.findall(r"```sql\n(.*?)```", text, re.S):
        out.extend(s.strip() for s in block.split(";") if s.strip())
    return out


def _audit_commands() -> list[str]:
    text = (ROOT / "docs" / "audit.md").read_text()
    return [line.split("  #")[0].strip() for block in re.findall(r"```sh\n(.*?)```", text, re.S)
            for line in block.splitlines() if line.startswith("tokenmill audit")]


@pytest.mark.slow  # drives dvc through the tiny pipeline (tests/tiny_run.py)
def test_audit_guide_queries_run(tiny):
    """Every SQL statement of docs/audit.md runs on the audit connection of a real run's lineage, and every
    `tokenmill audit` command it shows exits 0 in the run's directory."""
    con = lineage.connect(tiny / "lineage" / lineage.DB_NAME)
    try:
        # A document in the first steps of the plan (so every run trained it), and a near duplicate.
        doc_id, url = con.execute("""SELECT p.doc_id, r.url FROM plan p JOIN records r USING (doc_id)
                                     ORDER BY p.position LIMIT 1""").fetchone()
        fill = {"<doc_id>": doc_id, "<url>": url, "<step>": "2", "<run>": "pretrain",
                "<benchmark>": con.execute("SELECT any_value(benchmark) FROM contamination").fetchone()[0]}
        results = {}
        queries = _audit_queries()
        assert len(queries) >= 12
        for query in queries:
            for key, value in fill.items():
                query = query.replace(key, value)
            assert not re.search(r"<[a-z_]+>", query), query  # a placeholder this test does not fill
            results[query.splitlines()[0]] = con.execute(query).fetchall()
    finally:
        con.close()
    by_comment = {k: v for k, v in results.items() if k.startswith("--")}
    assert by_comment["-- The record as read at ingest, with its source's licence and crawl snapshot."][0][0] == doc_id
    seen = by_comment["-- The steps of every training run that held tokens of the document (each planned visit "
                      "separately)."]
    # the annealing test's arms too: their steps before the branch are the full run's
    assert {r[0] for r in seen} == {"pretrain", "scout@s1", "scout@s2", "scout@s3", "anneal@reference#with",
                                    "anneal@reference#without"}
    assert by_comment["-- The other way round: the documents in one step of a run, with the tokens each contributed."]
    shares = by_comment["-- Tokens planned for training per licence (every planned visit: repeats count again)."]
    assert sum(r[2] for r in shares) == pytest.approx(1, abs=1e-3)
    trained = by_comment["-- Tokens actually trained by one run, per licence: the stream up to the run's last step "
                         "(a scout trains a"]
    steps = json.loads((tiny / "data" / "train" / "pretrain" / "summary.json").read_text())
    # Tokens of documents (end-of-text tokens excluded) within the stream the run trained.
    assert 0.9 * steps["tokens"] < sum(r[1] for r in trained) <= steps["tokens"]

    # A scored benchmark item that decontaminate found in the crawl, read from the evaluate stage's own files.
    results = json.loads((tiny / "data" / "evaluate" / "results.json").read_text())
    dirty_items = {}
    for name, b in results["benchmarks"].items():
        for line in (tiny / "data" / "evaluate" / b.get("samples", "-")).read_text().splitlines() if "samples" in b else []:
            row = json.loads(line)
            if row["dirty"]:
                dirty_items[(name, row["item_id"])] = row
    (bench, item_id), item_row = sorted(dirty_items.items())[0]
    con = lineage.connect(tiny / "lineage" / lineage.DB_NAME)
    try:
        overlapping = [r[0] for r in con.execute("SELECT doc_id FROM contamination WHERE benchmark = ? AND item_id = ?",
                                                 [bench, item_id]).fetchall()]
    finally:
        con.close()
    assert overlapping
    canary_runs = {json.loads((f.parent / "manifest.json").read_text())["stage"]:
                   {r["canary"]: r for r in pq.read_table(f).to_pylist()}
                   for f in (tiny / "data" / "train").rglob("canaries.parquet")}
    canary = sorted(canary_runs["pretrain"])[0]

    commands = _audit_commands()
    assert len(commands) >= 10
    for command in commands:
        args = shlex.split(command.replace("<url or doc_id>", doc_id).replace("<step>", "2")
                           .replace("<benchmark> <item_id>", f"{bench} {item_id}").replace("<canary>", canary))
        shown = tiny_run.run(args, tiny).stdout
        if args[2] == "item":  # every overlapping document, and the item's score as the evaluate stage wrote it
            assert all(f"document {d}" in shown for d in overlapping), shown
            assert f"acc {item_row['acc']:.4g}, " in shown and f"bpb {item_row['bpb']:.4g};" in shown, shown
            assert "left out of the clean score (dirty)" in shown, shown
        if args[2] == "canary":  # each run's exposure and rank as the run wrote them
            visits = canary_runs["pretrain"][canary]["planned_visits"]
            assert f"{visits} planned visit(s)" in shown, shown
            for run, by_canary in canary_runs.items():
                r = by_canary[canary]
                assert f"exposure {r['exposure']:.2f} bits (rank {r['rank']} of {r['candidates'] + 1})" in shown, run
        if args[2] == "doc":
            assert "trained       pretrain:" in shown, shown
        if args[2] == "sql":
            assert "PSF-2.0" in shown  # the standard library's code, planned for training
