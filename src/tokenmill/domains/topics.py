"""Topic domains: k-means clusters of the document embeddings, each named by its most distinctive words.

Clusters are found by faiss's k-means on the unit sphere (spherical: centroids renormalised, so similarity is
the cosine), seeded, on one thread (the same vectors in the same order give the same centroids), and numbered by
size, largest first (ties by the name), so `t00` is the same topic whenever the same documents are clustered.
A topic is named by class-based TF-IDF (BERTopic's c-TF-IDF): a word's frequency in the topic's documents
times log(1 + the mean words per topic / the word's frequency over all topics) — words frequent here and rare
elsewhere — over the `name_docs` documents nearest its centre; its examples are the documents nearest its centre.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NAME_CHARS = 3000  # of each document, read to name its topic: the opening states what a page is about


@dataclass
class Topics:
    centroids: np.ndarray  # k x dim, unit length, in topic order
    labels: np.ndarray  # per document: its topic's index
    similarity: np.ndarray  # per document: cosine to its topic's centre


def topic_count(documents: int, k: int, min_documents: int) -> int:
    """The topics `documents` documents make: k, or fewer where k would average fewer than min_documents each
    (at least one while there is a document)."""
    return min(k, max(1, documents // min_documents)) if documents else 0


def cluster(vectors: np.ndarray, k: int, seed: int, iterations: int) -> Topics:
    """k topics (fewer when there are fewer documents than k) of unit vectors, numbered largest first."""
    import faiss  # 0.4 s: imported where clustering happens, not where the schema is read

    n, dim = vectors.shape
    k = max(1, min(k, n))
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # a fixed order of the centroid sums: the same clusters on every machine
    try:
        km = faiss.Kmeans(dim, k, niter=iterations, seed=seed, spherical=True, verbose=False,
                          min_points_per_centroid=1, max_points_per_centroid=max(256, n))
        km.train(np.ascontiguousarray(vectors, dtype=np.float32))
        sims = vectors @ km.centroids.T
    finally:
        faiss.omp_set_num_threads(threads)
    raw = sims.argmax(axis=1)
    sizes = np.bincount(raw, minlength=k)
    order = sorted(range(k), key=lambda c: (-sizes[c], tuple(np.round(km.centroids[c], 6))))
    rank = np.empty(k, dtype=np.int64)
    rank[order] = np.arange(k)
    labels = rank[raw]
    return Topics(km.centroids[order], labels, sims[np.arange(n), raw])


def topic_id(index: int) -> str:
    return f"t{index:02d}"


def names(texts: list[str], labels: np.ndarray, similarity: np.ndarray, k: int, terms: int,
          name_docs: int = 500) -> list[list[str]]:
    """The `terms` most distinctive words of each topic (c-TF-IDF over its documents nearest the centre)."""
    from sklearn.feature_extraction.text import CountVectorizer  # 1 s to import: only where topics are named

    picked = []
    for t in range(k):
        members = np.flatnonzero(labels == t)
        members = members[np.argsort(-similarity[members], kind="stable")][:name_docs]
        picked.append(members)
    docs = [" ".join(texts[i][:NAME_CHARS] for i in members) for members in picked]
    if not any(d.strip() for d in docs):
        return [[] for _ in range(k)]
    vec = CountVectorizer(stop_words="english", token_pattern=r"(?u)\b[^\W\d_]{3,}\b", lowercase=True)
    try:
        counts = vec.fit_transform(docs).toarray().astype(np.float64)  # topics x words
    except ValueError:  # nothing but stop words
        return [[] for _ in range(k)]
    words = vec.get_feature_names_out()
    tf = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    mean_words = counts.sum() / k
    idf = np.log1p(mean_words / np.maximum(counts.sum(axis=0), 1))
    ctfidf = tf * idf
    out = []
    for t in range(k):
        top = np.argsort(-ctfidf[t], kind="stable")[:terms]
        out.append([str(words[j]) for j in top if ctfidf[t, j] > 0])
    return out
