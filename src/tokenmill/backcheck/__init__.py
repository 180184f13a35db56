"""Embedding back-checks (the backcheck stage): semantic duplicates beyond MinHash, and paraphrased benchmark
items beyond n-grams, both from the embed stage's document vectors (nothing is embedded twice; the benchmark
items are embedded here, by the same model).

- semantic.py: the index search (nearest neighbours above a cosine threshold), duplicate clusters, each
  cluster's kept document; the nearest benchmark item of each document.
- stage.py: the document stage: one decision per document (reported by default, dropped when a parameter
  says so), the tables `semantic_duplicates` and `suspects` the lineage loads.
- params.py: the `backcheck` section.
"""
