"""Build the embedded default corpus from the Python installation it runs in.

    build_sample(out_dir, n_docs=12000, seed=1234) -> counts

No network and no clock: sources are read in sorted order, every random choice comes from
random.Random streams seeded with (seed, part), and WARC dates and record ids are derived from the
seed. The same installation and arguments give byte-identical files.

Layout written under out_dir:

    web/crawl-00000.warc.gz ...      pages (warcinfo, then request + response per page), ~2000 per file
    web/crawl-truncated.warc.gz      3 complete responses, then one cut off mid gzip member
    code/stdlib-00000.jsonl.zst      {"text", "path", "url"} per line: standard-library sources
    reference/reference-00000.parquet  columns text, title, url: pydoc topics and stdlib docstrings
    licenses/<name>.txt              licence texts shipped in dist-info folders (natural near-duplicates)
    eval/heldout.jsonl               multiple-choice items cut from reference documents left out above
    ground_truth.json                {"params", "counts", "cases"}: planted pages and what each stage should do

Each case names its page ("url", exactly as in the WARC, and "file") and "expect": {stage: fate} for the
stage(s) that decide it, a fate being "keep", "modify" or "drop:<reason>"; other stages are unspecified.
Copies (exact and near duplicates) always come after their original ("of_url") in crawl order.
The return value is ground_truth.json's "counts".
"""

from __future__ import annotations

import itertools
import json
import platform
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from tokenmill.decontam.readers import read_items
from tokenmill.execution import log_phase

from . import pages as P, plant, sources, stdlib
from .markup import Block, block, prose_score, prose_words, slug
from .site import Page, Site
from .warc import write_crawl, write_truncated

SHARES = {"code": 0.22, "reference": 0.14}  # of the documents left after licences; the crawl takes the rest
LICENCE_SHARE, LICENCE_CAP = 0.025, 300
PAGES_PER_WARC = 2000
DOCS_PER_SHARD = 5000  # code JSONL lines / reference Parquet rows per file
BASE_CASES = {"exact_duplicate": 30, "near_duplicate": 40, "spam": 20, "boilerplate": 20, "pii": 30, "non_english": 20}
NEAR_DUP_RATES = (0.003, 0.01, 0.05, 0.1, 0.2)
# Expected fates of near-duplicate copies, from the Jaccard of word 5-gram sets: dedup's default threshold is
# 0.8 and a 128-permutation MinHash estimate has a standard error of about 0.035, so copies between these two
# bounds may go either way and carry no expectation.
NEAR_DUP_DROP_ABOVE = 0.88
NEAR_DUP_KEEP_BELOW = 0.70
GUARD_NGRAM = 8  # corpus documents sharing a word 8-gram with an eval passage are left out (about 50 at default size)
TRUNCATED_FILE = "web/crawl-truncated.warc.gz"
TRUNCATED_PAGES = 4  # 3 complete + 1 cut off

# (charset, where it is declared, snippet) of the pages whose HTML is not UTF-8. Snippets are written
# for this purpose except the Japanese one, which comes from the installation (see sources.japanese_text).
CHARSET_CASES = [
    ("windows-1252", "http_header", "\u201cThe na\u00efve caf\u00e9 in Z\u00fcrich charged \u20ac4.50 for a cr\u00e8me br\u00fbl\u00e9e \u2014 a bargain,\u201d the maintainer wrote."),
    ("iso-8859-1", "meta", "Se\u00f1or M\u00fcller\u00b4s fa\u00e7ade renderer now handles \u00c5ngstr\u00f6m units, S\u00e3o Paulo addresses and \u00bdpt fonts."),
    ("shift_jis", "both", None),
]

EXPECT = {
    "exact_duplicate": {"dedup": "drop:exact_duplicate"},
    "spam": {"filter": "drop:spam"},
    "boilerplate": {"filter": "drop:boilerplate"},
    "pii": {"pii": "modify"},
    "truncated_record": {"ingest": "drop:truncated_record"},
    "non_utf8": {"ingest": "keep"},
    "non_english": {"filter": "drop:language"},
    "contaminated": {"decontaminate": "drop:contaminated"},
}


def plan_cases(n_docs: int, eval_items: int, planted_eval_items: int) -> dict[str, int]:
    """How many pages of each planted case: scaled with n_docs, never fewer than 2."""
    scale = n_docs / 12000
    n = {k: max(2, round(v * scale)) for k, v in BASE_CASES.items()}
    n["near_duplicate"] = max(len(NEAR_DUP_RATES), n["near_duplicate"])  # every edit rate at every size
    n["non_utf8"] = len(CHARSET_CASES)
    n["contaminated"] = max(0, min(planted_eval_items, eval_items))
    n["truncated_record"] = 1
    return n


def passage(item: dict) -> str:
    """What a page copying an eval item holds: its context and its gold answer."""
    return item["context"] + " " + item["choices"][item["gold"]]


# Real benchmark items are planted from the first items of each file: the evaluation scores the first
# evaluate.limit items of a file (a seeded random sample, tokenmill.benchmarks), so a limit of at least this
# many scores every planted item, and the report's all/clean split shows real contamination.
PLANT_FROM_FIRST = 20
MIN_PLANTED_WORDS = 12  # decontamination indexes items of 8 words or more; planted ones are clearly above


def benchmark_passages(benchmarks_dir: Path | None) -> list[tuple[str, str, str]]:
    """(benchmark, item_id, passage) of every item of the benchmarks stage's files, in file order, with the
    text decontamination indexes (tokenmill.decontam.readers)."""
    if benchmarks_dir is None:
        return []

    catalog = json.loads((benchmarks_dir / "catalog.json").read_text())
    out = []
    for name, b in sorted(catalog["benchmarks"].items()):
        spec = {"name": name, "format": b["format"], "path": str(benchmarks_dir / b["file"])}
        out.extend((bench, iid, text) for bench, iid, text, _ in read_items(spec))
    return out


def pick_benchmark_items(passages: list[tuple[str, str, str]], n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    """n items to plant, round-robin over the benchmarks, each among the first PLANT_FROM_FIRST of its file."""
    pools: dict[str, list[tuple[str, str, str]]] = {}
    seen: dict[str, int] = {}
    for p in passages:
        seen[p[0]] = seen.get(p[0], 0) + 1
        pool = pools.setdefault(p[0], [])
        if seen[p[0]] <= PLANT_FROM_FIRST and len(p[2].split()) >= MIN_PLANTED_WORDS:
            pool.append(p)
    for pool in pools.values():
        rng.shuffle(pool)
    names, picked = sorted(pools), []
    while len(picked) < n and any(pools.values()):
        for name in names:
            if pools[name] and len(picked) < n:
                picked.append(pools[name].pop())
    return picked


class Guard:
    """Finds documents that share a word n-gram with an evaluation passage (context + gold answer)."""

    def __init__(self, passages: list[str], n: int = GUARD_NGRAM):
        self.n, self.grams = n, set()
        for text in passages:
            w = plant.words(text)
            self.grams.update(zip(*(w[i:] for i in range(n))))

    def hits(self, text: str) -> bool:
        w = plant.words(text)
        return not self.grams.isdisjoint(zip(*(w[i:] for i in range(self.n))))


def first(docs, n: int, ok) -> list:
    """The first n documents of an iterable that pass ok()."""
    out = []
    for d in docs:
        if len(out) == n:
            break
        if ok(d):
            out.append(d)
    return out


def take(pool: list, n: int, rng: random.Random, ok) -> list:
    """n random members of pool that pass ok(), in pool order."""
    order = list(range(len(pool)))
    rng.shuffle(order)
    chosen = []
    for i in order:
        if len(chosen) == n:
            break
        if ok(pool[i]):
            chosen.append(i)
    return [pool[i] for i in sorted(chosen)]


# --- the crawl -----------------------------------------------------------------------------------


def _insert_after_first_paragraph(blocks: list[Block], new: Block) -> list[Block]:
    at = next((i + 1 for i, b in enumerate(blocks) if b.kind == "p"), len(blocks))
    return blocks[:at] + [new] + blocks[at:]


def _url_variant(page: Page, rng: random.Random, taken: set[str]) -> str:
    """Another path under which a crawler could fetch the same bytes."""
    for _ in range(20):
        path = rng.choice([
            page.path + "?utm_source=newsletter&utm_medium=email",
            page.path + "?ref=sidebar",
            page.path + f"?sessionid={rng.getrandbits(48):012x}",
            page.path + ("index.html" if page.path.endswith("/") else "/"),
            "/amp" + page.path,
            "/print" + page.path,
        ])
        if f"https://{page.site.host}{path}" not in taken:
            return path
    raise RuntimeError("no free URL variant")  # pragma: no cover


class Crawl:
    """Collects the pages of the crawl and the planted cases, then orders and writes them."""

    def __init__(self, seed: int, rng: random.Random):
        self.seed, self.rng = seed, rng
        self.normal: list[Page] = []
        self.planted: list[tuple[Page, dict, Page | None]] = []  # (page, case, original it copies)
        self.urls: set[str] = set()

    def add_case(self, page: Page, case: dict, original: Page | None = None):
        if page.url in self.urls:
            raise RuntimeError(f"duplicate URL {page.url}")
        self.urls.add(page.url)
        case["url"] = page.url
        self.planted.append((page, case, original))

    def ordered(self) -> list[Page]:
        """Normal pages in random order, planted pages inserted at random places; a copy always comes
        after its original, so a keep-the-first-seen deduplicator keeps the original."""
        order = list(self.normal)
        self.rng.shuffle(order)
        for page, _, original in self.planted:
            lo = order.index(original) + 1 if original is not None else 0
            order.insert(self.rng.randint(lo, len(order)), page)
        return order


def build_web(dists, n_web: int, n_cases: dict, planted: list[tuple[str, str, str]], guard: Guard, seed: int,
              out: Path) -> tuple[dict, list[dict]]:
    """planted: the (benchmark, item_id, passage) of the eval items to plant, n_cases["contaminated"] of them."""
    rng = random.Random(f"{seed}:web")
    sites = {d.name: Site(d.name, d.display, str(seed), links=d.links) for d in dists}
    planted_kinds = ("exact_duplicate", "near_duplicate", "spam", "boilerplate", "pii", "non_utf8", "non_english", "contaminated")
    n_fresh = n_cases["pii"] + n_cases["contaminated"] + n_cases["non_utf8"] + TRUNCATED_PAGES
    n_normal = n_web - sum(n_cases[k] for k in planted_kinds) - TRUNCATED_PAGES
    if n_normal < 50:
        raise ValueError(f"a crawl of {n_web} pages is too small for the planted cases; use n_docs >= 300 or so")

    # Normal pages: README sections up to half, API pages from docstrings for the rest.
    seen: set[str] = set()
    candidates: list[Page] = []

    def accept(page: Page) -> bool:
        if not P.is_normal(page) or page.url in seen or guard.hits(page.text):
            return False
        prints = P.fingerprints(page)
        if seen.intersection(prints):
            return False
        seen.update(prints + (page.url,))
        candidates.append(page)
        return True

    need = n_normal + n_fresh
    readme_order = list(dists)
    rng.shuffle(readme_order)  # whole READMEs of randomly chosen packages, as a crawler visits sites
    for d in readme_order:
        if len(candidates) >= need // 2:
            break
        for page in P.readme_pages(d, sites[d.name]):
            if len(candidates) < need // 2:
                accept(page)
    api = P.api_pages(dists, sites, rng)
    try:
        for page in api:
            if len(candidates) >= need:
                break
            accept(page)
    finally:
        api.close()
    rng.shuffle(candidates)

    # Fresh pages carry the cases that modify a page (PII, contamination, charsets, truncation), and those
    # cases are judged at pii and decontaminate, after filter and quality: hosts must be the most prose-like
    # pages (sentences, no code), so that the case reaches the stage that is meant to catch it.
    rich = [p for p in candidates if sum(b.kind == "p" for b in p.blocks) >= 2 and prose_words(p.blocks) >= 100]
    rich.sort(key=lambda p: (-prose_score(p.blocks), p.url))
    fresh = rich[:n_fresh]
    if len(fresh) < n_fresh or len(candidates) - len(fresh) < n_normal // 2:
        raise RuntimeError("this Python installation holds too little documentation for the requested sample size")
    fresh_ids = {id(p) for p in fresh}
    crawl = Crawl(seed, rng)
    crawl.normal = [p for p in candidates if id(p) not in fresh_ids][:n_normal]
    crawl.urls.update(p.url for p in crawl.normal)
    fresh.reverse()  # consumed with pop()

    # Sidebars list a site's normal pages; identical on every page of the site.
    by_site: dict[str, list[Page]] = {}
    for p in crawl.normal:
        by_site.setdefault(p.site.label, []).append(p)
    for label, ps in by_site.items():
        sites[label].pages = [(p.title[:80], p.path) for p in sorted(ps, key=lambda p: p.path)[:8]]

    # 1-2. Exact and near duplicates of normal pages; near copies live on mirror sites.
    # Near-duplicate originals are long and mostly prose, so the Jaccard of a copy depends on its edit
    # rate rather than on how much unedited code the page happens to hold.
    def prose_rich(p: Page) -> bool:
        n = prose_words(p.blocks)
        return n >= 200 and n >= 0.8 * len(p.text.split())

    # Both kinds of originals come from the most prose-like pages, so the pairs survive filter and reach
    # dedup, the stage that must catch them: drawn at random from a pool three times the size needed.
    def pool(pages: list[Page], n: int) -> list[Page]:
        return sorted(pages, key=lambda p: (-prose_score(p.blocks), p.url))[: 3 * n]

    long_pages = pool([p for p in crawl.normal if prose_rich(p)], n_cases["near_duplicate"])
    near_orig = rng.sample(long_pages, min(len(long_pages), n_cases["near_duplicate"]))
    near_ids = {id(p) for p in near_orig}
    exact_orig = rng.sample(pool([p for p in crawl.normal if id(p) not in near_ids], n_cases["exact_duplicate"]),
                            n_cases["exact_duplicate"])
    for orig in exact_orig:
        copy = Page(orig.site, _url_variant(orig, rng, crawl.urls), orig.blocks, kind="exact_duplicate")
        crawl.add_case(copy, {"case": "exact_duplicate", "of_url": orig.url, "expect": EXPECT["exact_duplicate"]}, orig)
    mirrors = [Site(f"mirror-{k}", f"Docs Mirror {k}", str(seed)) for k in range(1, 5)]
    for i, orig in enumerate(near_orig):
        rate = NEAR_DUP_RATES[i % len(NEAR_DUP_RATES)]
        blocks, n_edits = plant.edit_words(orig.blocks, rate, rng)
        copy = Page(mirrors[i % len(mirrors)], f"/{orig.site.label}{orig.path}", blocks, kind="near_duplicate")
        jac = round(plant.jaccard(orig.text, copy.text), 4)
        expect = ({"dedup": "drop:near_duplicate"} if jac >= NEAR_DUP_DROP_ABOVE
                  else {"dedup": "keep"} if jac <= NEAR_DUP_KEEP_BELOW else {})
        case = {"case": "near_duplicate", "of_url": orig.url, "edit_rate": rate, "edits": n_edits, "jaccard": jac, "expect": expect}
        crawl.add_case(copy, case, orig)
    for m in mirrors:
        m.pages = sorted((p.title[:80], p.path) for p, c, _ in crawl.planted if p.site is m)[:8]

    # 3. Keyword-stuffed spam, each on its own shop site.
    for _ in range(n_cases["spam"]):
        label, blocks, product = plant.spam_blocks(rng)
        while f"https://{label}.sample.invalid/" in crawl.urls:
            label += "x"
        site = Site(label, f"Cheap {product.title()} Store", str(seed), links=[("Buy now", f"https://{label}.sample.invalid/buy/")])
        site.pages = [("Buy now", "/buy/"), ("Best price", "/deals/"), ("Shipping", "/shipping/")]
        crawl.add_case(Page(site, "/", blocks, kind="spam"), {"case": "spam", "keyword": product, "expect": EXPECT["spam"]})

    # 4. Pages that are nothing but navigation, cookie banner, link lists and footer.
    big_sites = sorted(label for label, ps in by_site.items() if len(ps) >= 3)
    used: dict[str, set[str]] = {}
    made = 0
    while made < n_cases["boilerplate"] and big_sites:
        site = sites[rng.choice(big_sites)]
        got = plant.boilerplate_blocks(rng, site.pages, used.setdefault(site.label, set()))
        if got is None:
            big_sites.remove(site.label)
            continue
        path, blocks = got
        used[site.label].add(path)
        crawl.add_case(Page(site, path, blocks, kind="boilerplate"), {"case": "boilerplate", "expect": EXPECT["boilerplate"]})
        made += 1

    # 5. Personal data added to fresh pages; every entity type appears at every size.
    emails = sorted({e for d in dists for e in d.emails})
    kinds = list(plant.PII_TYPES)
    rng.shuffle(kinds)
    pos = 0
    for _ in range(n_cases["pii"]):
        base = fresh.pop()
        k = rng.randint(4, 5)
        text, entities = plant.pii_paragraph([kinds[(pos + j) % len(kinds)] for j in range(k)], rng, emails)
        pos += k
        page = Page(base.site, base.path, _insert_after_first_paragraph(base.blocks, block("p", text)), kind="pii")
        crawl.add_case(page, {"case": "pii", "entities": entities, "expect": EXPECT["pii"]})

    # 6. HTML in other encodings, declared in the HTTP header, in a <meta> tag, or both.
    ja_source, ja_text = sources.japanese_text(dists)
    for charset, declared, snippet in CHARSET_CASES:
        base = fresh.pop()
        para, source = snippet, None
        if snippet is None:  # Japanese: the first sentence of the passage found in the installation
            snippet = ja_text.split("\u3002")[0] + "\u3002" if "\u3002" in ja_text else ja_text
            para, source = f"Japanese summary: {ja_text}", ja_source
        page = Page(base.site, base.path, _insert_after_first_paragraph(base.blocks, block("p", para)), kind="non_utf8",
                    charset=charset, header_charset=charset if declared in ("http_header", "both") else None,
                    meta_charset=charset if declared in ("meta", "both") else None)
        case = {"case": "non_utf8", "charset": charset, "declared_in": declared, "snippet": snippet, "expect": EXPECT["non_utf8"]}
        crawl.add_case(page, case if source is None else {**case, "source": source})

    # 7. Real non-English prose, on the lm-eval site it ships with.
    lm_site = sites.get("lm-eval") or Site("lm-eval", "lm-eval", str(seed))
    by_lang: dict[str, list[str]] = {}
    for lang, rel in sources.foreign_sources(dists):
        by_lang.setdefault(lang, []).append(rel)
    for rels in by_lang.values():
        rng.shuffle(rels)
    foreign, langs = [], sorted(by_lang)
    i = 0
    while len(foreign) < n_cases["non_english"] and any(by_lang.values()):
        lang = langs[i % len(langs)]
        i += 1
        if by_lang[lang]:
            doc = sources.foreign_document(dists, lang, by_lang[lang].pop())
            if doc:
                foreign.append(doc)
    if not foreign:
        foreign = sources.FALLBACK_FOREIGN[: n_cases["non_english"]]
    for doc in foreign:
        blocks = [block("h1", doc["title"])] + [block("p", v) if k == "p" else Block("ol", v) for k, v in doc["paragraphs"]]
        path = f"/i18n/{doc['language']}/{slug(Path(doc['source']).stem)}/"
        page = Page(lm_site, path, blocks, kind="non_english", lang=doc["language"])
        crawl.add_case(page, {"case": "non_english", "language": doc["language"], "source": doc["source"], "expect": EXPECT["non_english"]})

    # 8. Evaluation passages planted into fresh pages, in several disguises.
    for i, (benchmark, iid, text) in enumerate(planted):
        base = fresh.pop()
        variant = plant.CONTAMINATION_VARIANTS[i % len(plant.CONTAMINATION_VARIANTS)]
        page = Page(base.site, base.path, plant.contaminate(base.blocks, text, variant, rng), kind="contaminated")
        crawl.add_case(page, {"case": "contaminated", "benchmark": benchmark, "eval_item": iid, "variant": variant,
                              "expect": EXPECT["contaminated"]})

    # Order, render (copies reuse their original's bytes) and write.
    start = datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(days=seed % 365, seconds=seed % 86400)
    order = crawl.ordered()
    rendered: dict[int, bytes] = {}
    originals = {id(page): orig for page, case, orig in crawl.planted if case["case"] == "exact_duplicate"}
    for page in order:
        src = originals.get(id(page), page)
        rendered.setdefault(id(src), src.render())
    files: dict[str, int] = {}
    file_of: dict[int, str] = {}
    for k in range(0, len(order), PAGES_PER_WARC):
        name = f"web/crawl-{k // PAGES_PER_WARC:05d}.warc.gz"
        chunk = order[k : k + PAGES_PER_WARC]
        records = [(p.url, rendered[id(originals.get(id(p), p))], p.content_type) for p in chunk]
        write_crawl(out / name, records, seed, start + timedelta(hours=k // PAGES_PER_WARC))
        files[name] = len(chunk)
        file_of.update((id(p), name) for p in chunk)

    # The truncated file: 3 fresh pages, then the longest of the 4 cut mid-record.
    tail = sorted([fresh.pop() for _ in range(TRUNCATED_PAGES)], key=lambda p: len(p.render()))
    write_truncated(out / TRUNCATED_FILE, [(p.url, p.render(), p.content_type) for p in tail], seed, start - timedelta(days=1))
    files[TRUNCATED_FILE] = len(tail)

    cases = []
    for page, case, _ in crawl.planted:
        cases.append({"case": case.pop("case"), "url": case.pop("url"), "file": file_of[id(page)], **case})
    cases.append({"case": "truncated_record", "url": tail[-1].url, "file": TRUNCATED_FILE, "expect": EXPECT["truncated_record"]})
    counts = {"web_pages": sum(files.values()), "web_normal_pages": len(crawl.normal) + TRUNCATED_PAGES - 1, "web_files": files}
    return counts, cases


# --- the whole sample ----------------------------------------------------------------------------


def _write_code(out: Path, docs: list[stdlib.CodeDoc]) -> list[str]:
    names = []
    for k in range(0, max(1, len(docs)), DOCS_PER_SHARD):
        name = f"code/stdlib-{k // DOCS_PER_SHARD:05d}.jsonl.zst"
        lines = "".join(json.dumps({"text": d.text, "path": d.path, "url": d.url}, ensure_ascii=False) + "\n" for d in docs[k : k + DOCS_PER_SHARD])
        (out / name).write_bytes(zstandard.ZstdCompressor(level=3).compress(lines.encode("utf-8")))
        names.append(name)
    return names


def _write_reference(out: Path, docs: list[stdlib.RefDoc]) -> list[str]:
    names = []
    for k in range(0, max(1, len(docs)), DOCS_PER_SHARD):
        name = f"reference/reference-{k // DOCS_PER_SHARD:05d}.parquet"
        part = docs[k : k + DOCS_PER_SHARD]
        columns = [pa.array([getattr(d, c) for d in part], pa.string()) for c in ("text", "title", "url")]
        table = pa.Table.from_arrays(columns, names=["text", "title", "url"])
        pq.write_table(table, out / name, compression="zstd")
        names.append(name)
    return names


def _heldout_items(refs, seed: int, eval_items: int) -> tuple[list[dict], list, list]:
    """The held-out eval items, cut from the first reference documents with a usable prose paragraph:
    (items, the documents they came from, the documents passed over on the way)."""
    cut_rng = random.Random(f"{seed}:eval")
    cuts, spare = [], []
    for doc in refs if eval_items > 0 else ():
        cut = stdlib.cut_document(doc, cut_rng)
        if cut:
            cuts.append((doc, cut))
        else:
            spare.append(doc)
        if len(cuts) == eval_items:
            break
    return stdlib.make_items(cuts, cut_rng), [doc for doc, _ in cuts], spare


def _write_items(out: Path, items: list[dict]) -> None:
    with open(out / "eval" / "heldout.jsonl", "w", encoding="utf-8", newline="\n") as fh:
        for it in items:
            fh.write(json.dumps(it, ensure_ascii=False) + "\n")


def build_sample(out_dir: Path, n_docs: int = 12000, seed: int = 1234, eval_items: int = 200, planted_eval_items: int = 24,
                 benchmarks_dir: Path | None = None, planted_benchmark_items: int = 0) -> dict:
    """Write the sample corpus into out_dir (see the module docstring) and return its counts.

    benchmarks_dir: the benchmarks stage's output; its items are kept out of the corpus like the held-out
    set's, and planted_benchmark_items of them are planted in the crawl (round-robin over the benchmarks)."""
    out = Path(out_dir)
    for sub in ("web", "code", "reference", "licenses", "eval"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    n_cases = plan_cases(n_docs, eval_items, planted_eval_items)
    dists = sources.distributions()
    std_files = sources.stdlib_sources()

    # The evaluation set comes first: every other part is kept clear of its passages. Reference
    # documents arrive in random order; the first ones with a usable prose paragraph are held out.
    log_phase("sample", f"held-out evaluation set ({eval_items} items)")
    refs = stdlib.reference_stream(std_files, random.Random(f"{seed}:reference"))
    items, held, spare = _heldout_items(refs, seed, eval_items)
    real = benchmark_passages(benchmarks_dir)
    guard = Guard([passage(it) for it in items] + [text for _, _, text in real])
    plant_rng = random.Random(f"{seed}:plant")
    planted = [("tokenmill_heldout", it["id"], passage(it))
               for it in plant_rng.sample(items, min(n_cases["contaminated"], len(items)))]
    planted += pick_benchmark_items(real, planted_benchmark_items, plant_rng)
    n_cases["contaminated"] = len(planted)

    lic_pool = sources.licence_files(dists)
    n_lic = min(len(lic_pool), LICENCE_CAP, max(2, round(LICENCE_SHARE * n_docs)))
    rest = n_docs - n_lic
    clean = lambda d: not guard.hits(d.text)  # noqa: E731
    log_phase("sample", "reference and code documents from the standard library")
    ref_docs = first(itertools.chain(spare, refs), round(rest * SHARES["reference"]), clean)
    refs.close()
    ref_docs.sort(key=lambda d: d.url)
    exclude = {d.source for d in held} | {stdlib.TOPICS_SOURCE}  # the code must not quote held-out text
    code_docs = first(stdlib.code_stream(std_files, exclude, random.Random(f"{seed}:code")), round(rest * SHARES["code"]), clean)
    code_docs.sort(key=lambda d: (d.path, d.line))
    licences = take(lic_pool, n_lic, random.Random(f"{seed}:licences"), lambda x: not guard.hits(x[1]))
    # The crawl absorbs any shortfall of the other parts, so the total stays near n_docs.
    n_web = n_docs - len(code_docs) - len(ref_docs) - len(licences)

    log_phase("sample", f"web crawl ({n_web} pages with planted cases)")
    web_counts, cases = build_web(dists, n_web, n_cases, planted, guard, seed, out)
    log_phase("sample", "writing code, reference, licence and evaluation files")
    code_files = _write_code(out, code_docs)
    ref_files = _write_reference(out, ref_docs)
    for name, text in licences:
        (out / "licenses" / f"{name}.txt").write_bytes(text.encode("utf-8"))
    _write_items(out, items)

    case_counts: dict[str, int] = {}
    for c in cases:
        case_counts[c["case"]] = case_counts.get(c["case"], 0) + 1
    counts = {
        **web_counts,
        "code_docs": len(code_docs),
        "code_files": code_files,
        "reference_docs": len(ref_docs),
        "reference_files": ref_files,
        "licence_docs": len(licences),
        "total_docs": web_counts["web_pages"] + len(code_docs) + len(ref_docs) + len(licences),
        "eval_items": len(items),
        "heldout_reference_docs": len(held),
        "cases": case_counts,
    }
    params = {
        "n_docs": n_docs,
        "seed": seed,
        "eval_items": eval_items,
        "planted_eval_items": planted_eval_items,
        "planted_benchmark_items": planted_benchmark_items,
        "planted_benchmark_items_from_first": PLANT_FROM_FIRST,
        "python": platform.python_version(),
        "distributions": len(dists),
        "pages_per_warc": PAGES_PER_WARC,
        "main_text": "the text of the page's <article> element (its h1 title included)",
        "shingles": "word 5-grams; words are lowercase \\w+ runs of the main text",
        "near_duplicate_expectations": {"drop_above": NEAR_DUP_DROP_ABOVE, "keep_below": NEAR_DUP_KEEP_BELOW},
        "eval_overlap_guard": f"corpus documents sharing a word {GUARD_NGRAM}-gram with an eval passage (context + gold) are left out",
        "duplicate_order": "a copy always comes after its original in crawl order (file, then record)",
    }
    truth = {"params": params, "counts": counts, "cases": cases}
    (out / "ground_truth.json").write_text(json.dumps(truth, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return counts


def build_reference(out_dir: Path, n_docs: int = 2000, seed: int = 1234, eval_items: int = 200) -> dict:
    """The project's own reference corpus and held-out eval set, without the embedded crawl.

    What a real crawl needs from the project offline: reference prose for the quality classifier's positives
    (quality.positives.reference) and a benchmark the decontaminate and evaluate stages always have. Built as
    in build_sample, from the standard library's documentation, and kept clear of the eval passages.
    """
    out = Path(out_dir)
    for sub in ("reference", "eval"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    std_files = sources.stdlib_sources()
    log_phase("sample", f"reference corpus only ({n_docs} documents) and held-out evaluation set ({eval_items} items)")
    refs = stdlib.reference_stream(std_files, random.Random(f"{seed}:reference"))
    items, _, spare = _heldout_items(refs, seed, eval_items)
    guard = Guard([passage(it) for it in items])
    ref_docs = first(itertools.chain(spare, refs), n_docs, lambda d: not guard.hits(d.text))
    refs.close()
    ref_docs.sort(key=lambda d: d.url)
    ref_files = _write_reference(out, ref_docs)
    _write_items(out, items)
    return {"reference_docs": len(ref_docs), "reference_files": ref_files, "eval_items": len(items)}
