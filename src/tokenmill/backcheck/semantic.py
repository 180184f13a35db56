"""Semantic duplicates and the nearest benchmark item, from unit vectors (cosine similarity is a dot product).

Duplicates: every document's `k` nearest documents are looked up in a faiss index — exact below `exact_below`
documents, above it an inverted file of 4·sqrt(n) k-means cells (at most n/39) of which `probe` are searched (SemDeDup
partitions the corpus by k-means and compares within a cell; an inverted file is that partition, searched).
The pairs at or above the threshold are edges; a cluster is a connected component of them (scipy), and the
document kept of a cluster is its longest (an article rather than its own lead paragraphs, a page rather than
its excerpt; ties: the smallest doc_id), so a cluster keeps exactly one document whatever order the corpus is
read in. Cost per 1,000 documents and the projection to 10 million: RESULTS, "Embedding back-checks".
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # it logs at INFO which CPU build it loaded
import faiss  # noqa: E402
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


@dataclass
class Neighbours:
    first: np.ndarray  # edge i: document index, first < second
    second: np.ndarray
    similarity: np.ndarray  # cosine of the pair, float32
    nearest: np.ndarray  # per document: its nearest other document's index (-1 when alone)
    nearest_similarity: np.ndarray  # per document: that cosine (0 when alone)


def _index(vectors: np.ndarray, exact_below: int, probe: int, seed: int):
    n, dim = vectors.shape
    if n < exact_below:
        return faiss.IndexFlatIP(dim)
    cells = max(1, min(int(4 * math.sqrt(n)), n // 39))  # faiss's k-means wants at least 39 points per cell
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, cells, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    sample = np.random.default_rng(seed).choice(n, size=min(n, cells * 64), replace=False)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # the same cells on every machine (a fixed order of the centroid sums)
    try:
        index.train(np.ascontiguousarray(vectors[np.sort(sample)]))
    finally:
        faiss.omp_set_num_threads(threads)
    index.nprobe = probe
    return index


def neighbours(vectors: np.ndarray, threshold: float, k: int = 16, exact_below: int = 50_000, probe: int = 8,
               seed: int = 0) -> Neighbours:
    """The pairs of documents with cosine >= threshold among each document's k nearest, each pair once."""
    n = vectors.shape[0]
    empty = np.zeros(0, dtype=np.int64)
    if n < 2:
        return Neighbours(empty, empty, np.zeros(0, np.float32), np.full(n, -1), np.zeros(n, np.float32))
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    index = _index(x, exact_below, probe, seed)
    index.add(x)
    sims, ids = index.search(x, min(k, n - 1) + 1)  # each document finds itself too
    rows = np.arange(n)[:, None]
    other = (ids >= 0) & (ids != rows)
    # A document's nearest other one: the first hit that is not itself (an exact copy may come first).
    first = np.where(other.any(axis=1), other.argmax(axis=1), 0)
    nearest = np.where(other.any(axis=1), ids[np.arange(n), first], -1)
    nearest_sim = np.where(nearest >= 0, sims[np.arange(n), first], 0).astype(np.float32)
    keep = other & (sims >= threshold)
    a = np.broadcast_to(rows, ids.shape)[keep]
    b = ids[keep]
    lo, hi, s = np.minimum(a, b), np.maximum(a, b), sims[keep]
    if lo.size:
        order = np.lexsort((-s, hi, lo))  # each pair once, its highest cosine (both directions agree when exact)
        lo, hi, s = lo[order], hi[order], s[order]
        first_of_pair = np.ones(lo.size, dtype=bool)
        first_of_pair[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
        lo, hi, s = lo[first_of_pair], hi[first_of_pair], s[first_of_pair]
    return Neighbours(lo.astype(np.int64), hi.astype(np.int64), s.astype(np.float32), nearest, nearest_sim)


@dataclass
class Clusters:
    cluster: np.ndarray  # per document: the index of its cluster's kept document, -1 when in no cluster
    size: np.ndarray  # per document: its cluster's size (1 when in none)


def clusters(n: int, pairs: Neighbours, lengths: np.ndarray, doc_ids: list[str]) -> Clusters:
    """Connected components of the pairs; each names the document it keeps (the longest, then smallest doc_id)."""
    graph = coo_matrix((np.ones(pairs.first.size, dtype=np.int8), (pairs.first, pairs.second)), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    size = np.bincount(component)[component]
    cluster = np.full(n, -1, dtype=np.int64)
    members: dict[int, list[int]] = {}
    for i in np.flatnonzero(size > 1):
        members.setdefault(int(component[i]), []).append(int(i))
    for group in members.values():
        kept = min(group, key=lambda i: (-int(lengths[i]), doc_ids[i]))
        cluster[group] = kept
    return Clusters(cluster, np.where(cluster >= 0, size, 1))


def nearest_items(doc_vectors: np.ndarray, item_vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per document: the index of the benchmark item nearest it and their cosine (exact search)."""
    n = doc_vectors.shape[0]
    if n == 0 or item_vectors.shape[0] == 0:
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.float32)
    index = faiss.IndexFlatIP(item_vectors.shape[1])
    index.add(np.ascontiguousarray(item_vectors, dtype=np.float32))
    sims, ids = index.search(np.ascontiguousarray(doc_vectors, dtype=np.float32), 1)
    return ids[:, 0].astype(np.int64), sims[:, 0].astype(np.float32)


_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


def paragraph_windows(text: str, min_words: int, max_chars: int) -> list[str]:
    """The passages of a document a paraphrased benchmark item may sit in on its own: each paragraph (text between
    blank lines) and each pair of neighbouring paragraphs (a question and its answer apart), cut at max_chars,
    those of min_words words or more. None for a document of one paragraph (its own vector is that passage)."""
    paragraphs = [p.strip() for p in _BLANK_LINE.split(text) if p.strip()]
    if len(paragraphs) < 2:
        return []
    windows = []
    for i, p in enumerate(paragraphs):
        windows.append(p)
        if i + 1 < len(paragraphs):
            windows.append(p + "\n\n" + paragraphs[i + 1])
    return [w[:max_chars] for w in windows if len(w.split()) >= min_words]
