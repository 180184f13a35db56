"""Embeddings, topic and format domains, and a toxicity tag: what a mixture can weight beyond sources and tiers.

Two stages, after the last document stage:

    decontaminate -> embed     a unit vector per kept document (embed.py: a static model inside its wheel,
                               chunks of a long document pooled): vectors/<shard>.parquet (doc_id, vector)
    decontaminate -> domains   a document stage (labels.py): topics (topics.py: seeded k-means of the vectors,
                    -> tokenize  each named by its distinctive words and examples), the format (formats.py: rules),
                               the toxicity score (toxicity.py); tags, drops only when told to

The lineage holds each document's topic, format and toxicity score; tokenize.buckets makes mixture buckets of them.
"""
