"""How well the tokenizer fits each bucket, measured before the corpus is tokenized.

A bucket the tokenizer fragments (few bytes per token, many tokens per word, many byte-fallback tokens)
costs more tokens of the training budget per byte of text and teaches the model spelling rather than
language: this is the number to look at before raising that bucket's weight or the vocabulary size.
"""

from __future__ import annotations


import numpy as np

from .core import Tokenizer
from .sample import Source, as_stream

# A bucket is flagged as fragmented past either of these (both are per token).
MAX_BYTE_FALLBACK = 0.01
MIN_BYTES_PER_TOKEN = 2.0


def audit(tokenizer: Tokenizer, texts_by_bucket: Source, max_bytes_per_bucket: int | None = None,
          batch_docs: int = 256, num_threads: int = 1) -> dict[str, dict]:
    """Per bucket: documents, bytes, words, tokens, bytes_per_token, chars_per_token, tokens_per_word,
    byte_fallback_rate (share of tokens that are <0xNN> pieces), unk_rate and a `fragmented` flag.

    Words are whitespace-separated (str.split), so tokens_per_word means little for scripts written
    without spaces (Chinese, Japanese, Thai); bytes_per_token and byte_fallback_rate work for all.
    max_bytes_per_bucket stops reading a bucket once that many bytes were measured (documents are taken
    in the source's order).
    """
    mask = tokenizer.byte_mask
    acc: dict[str, dict[str, int]] = {}
    pending: dict[str, list[str]] = {}

    def flush(bucket: str) -> None:
        texts = pending.pop(bucket, [])
        if not texts:
            return
        a = acc[bucket]
        for ids in tokenizer.encode_batch(texts, num_threads=num_threads):
            arr = np.asarray(ids, dtype=np.int64)
            a["tokens"] += len(arr)
            a["byte_tokens"] += int(mask[arr].sum()) if len(arr) else 0
            a["unk_tokens"] += int((arr == tokenizer.unk_id).sum())

    for bucket, text in as_stream(texts_by_bucket)():
        a = acc.setdefault(bucket, dict.fromkeys(("documents", "bytes", "chars", "words", "tokens",
                                                   "byte_tokens", "unk_tokens"), 0))
        if max_bytes_per_bucket is not None and a["bytes"] >= max_bytes_per_bucket:
            continue
        a["documents"] += 1
        a["bytes"] += len(text.encode("utf-8"))
        a["chars"] += len(text)
        a["words"] += len(text.split())
        pending.setdefault(bucket, []).append(text)
        if len(pending[bucket]) >= batch_docs:
            flush(bucket)
    for bucket in list(pending):
        flush(bucket)

    out = {}
    for bucket, a in sorted(acc.items()):
        t = a["tokens"]
        m = {
            **a,
            "bytes_per_token": round(a["bytes"] / t, 4) if t else None,
            "chars_per_token": round(a["chars"] / t, 4) if t else None,
            "tokens_per_word": round(t / a["words"], 4) if a["words"] else None,
            "byte_fallback_rate": round(a["byte_tokens"] / t, 6) if t else 0.0,
            "unk_rate": round(a["unk_tokens"] / t, 6) if t else 0.0,
        }
        m["fragmented"] = bool(t) and (m["byte_fallback_rate"] > MAX_BYTE_FALLBACK
                                       or m["bytes_per_token"] < MIN_BYTES_PER_TOKEN)
        out[bucket] = m
    return out
