"""Document embeddings: a pinned static model that ships inside its wheel, chunks of a long document pooled.

The model is WordLlama's l2_supercat (256 dimensions; `wordllama` on PyPI, its weights and tokenizer inside the
wheel, so nothing is downloaded: a run never reaches a hub). A static model averages the vectors of a text's
tokens; its batch is padded to its longest text, so a long document is cut into chunks of `chunk_chars`
characters at whitespace, at most `max_chunks` of them spread evenly over the document, each chunk embedded,
and the chunk vectors averaged weighted by their length, then scaled to unit length (cosine similarity is a
dot product). Measured against the alternative a user would pick (a MiniLM sentence transformer) in
benchmarks/RESULTS.md, "Embeddings".
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill import schema
from tokenmill.domains.params import Embed
from tokenmill.execution import make_executor
from tokenmill.runtime import StageResult, input_id

MODELS = {"wordllama/l2_supercat": ("l2_supercat", (64, 128, 256, 512, 1024))}

_LOADED: dict[tuple[str, int], object] = {}


def load(model: str, dim: int):
    """The model, loaded once per process from the files inside its wheel (downloads disabled)."""
    if (model, dim) not in _LOADED:
        import wordllama  # 0.3 s: imported where a model is needed, not where the schema is read
        from wordllama import WordLlama  # (the same import, its class)

        config, dims = MODELS[model]
        if dim not in dims:
            raise ValueError(f"embed.dim: {model} has dimensions {list(dims)}, got {dim}")
        # The wheel holds weights/ and tokenizers/; WordLlama.load looks for the tokenizer in tokenizer/ first
        # (wordllama 0.4.0), so the package folder is given as its cache, where it looks in tokenizers/.
        _LOADED[(model, dim)] = WordLlama.load(config, dim=dim, cache_dir=Path(wordllama.__file__).parent,
                                               disable_download=True)
    return _LOADED[(model, dim)]


def chunks(text: str, chunk_chars: int, max_chunks: int) -> list[str]:
    """The document cut into pieces of about chunk_chars characters, ending at whitespace where one is near;
    at most max_chunks of them, spread evenly over the document (its beginning, middle and end all count)."""
    text = text.strip()
    if not text:
        return [""]
    pieces, start = [], 0
    while start < len(text):
        end = min(start + chunk_chars, len(text))
        if end < len(text):
            cut = text.rfind(" ", start + chunk_chars // 2, end)
            end = cut if cut > start else end
        pieces.append(text[start:end])
        start = end
    if len(pieces) > max_chunks:
        pick = np.linspace(0, len(pieces) - 1, max_chunks).round().astype(int)
        pieces = [pieces[i] for i in pick]
    return pieces


def chunk_documents(texts: list[str], chunk_chars: int, max_chunks: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Every text's chunks in one list, with the index of the text each belongs to and its length (its weight)."""
    pieces, owner = [], []
    for i, text in enumerate(texts):
        for piece in chunks(text or "", chunk_chars, max_chunks):
            pieces.append(piece)
            owner.append(i)
    return pieces, np.asarray(owner, dtype=np.int64), np.fromiter(map(len, pieces), np.float32, len(pieces))


def embed_chunks(pieces: list[str], owner: np.ndarray, weight: np.ndarray, n: int, model: str, dim: int,
                 batch_size: int) -> np.ndarray:
    """Unit-length float32 vectors of n texts from their chunks (chunk_documents); a text with no characters:
    the zero vector."""
    out = np.zeros((n, dim), dtype=np.float32)
    if not pieces:
        return out
    # Sorted by length so that a batch pads to texts of about its own length, not to the longest chunk.
    order = np.argsort(weight, kind="stable")
    vectors = np.empty((len(pieces), dim), dtype=np.float32)
    vectors[order] = load(model, dim).embed([pieces[i] for i in order], norm=False, batch_size=batch_size)
    np.add.at(out, owner, vectors * weight[:, None])
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def embed_texts(texts: list[str], model: str = "wordllama/l2_supercat", dim: int = 256, chunk_chars: int = 2000,
                max_chunks: int = 8, batch_size: int = 64) -> np.ndarray:
    """Unit-length float32 vectors, one per text (an empty text: the zero vector)."""
    return embed_chunks(*chunk_documents(texts, chunk_chars, max_chunks), len(texts), model, dim, batch_size)


def vector_schema(dim: int) -> pa.Schema:
    return pa.schema([("doc_id", pa.string()), ("vector", pa.list_(pa.float32(), dim))])


def embed_shard(task: tuple[str, str, dict]) -> dict:
    """Worker: the vectors of one document shard, written under the same file name."""
    path, out_dir, p = task
    table = pq.ParquetFile(path).read(columns=["doc_id", "text"])
    texts = table.column("text").to_pylist()
    pieces, owner, weight = chunk_documents(texts, p["chunk_chars"], p["max_chunks"])
    vectors = embed_chunks(pieces, owner, weight, len(texts), p["model"], p["dim"], p["batch_size"])
    out = pa.table({"doc_id": table.column("doc_id"),
                    "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), p["dim"])})
    schema.write_parquet(out, vector_schema(p["dim"]), Path(out_dir) / "vectors" / Path(path).name)
    return {"documents": len(texts), "chunks": len(pieces), "empty": int(sum(1 for t in texts if not (t or "").strip()))}


def embed_documents(input_dir: str | Path, params: Embed, execution_cfg: Mapping | None,
                    out_dir: str | Path) -> StageResult:
    """A vector for every document of input_dir (a document stage's output) under out_dir/vectors/."""
    input_dir, out_dir = Path(input_dir), Path(out_dir)
    result = StageResult()
    result.input_hashes[input_dir.name] = input_id(input_dir)
    shards = sorted((input_dir / "documents").glob("*.parquet"))
    tasks = [(str(p), str(out_dir), params.model_dump()) for p in shards]
    (out_dir / "vectors").mkdir(parents=True, exist_ok=True)
    with make_executor(execution_cfg, result.timing) as ex:
        parts = ex.map(embed_shard, tasks, desc="embed")
    docs = sum(r["documents"] for r in parts)
    result.extra.update({"model": params.model, "dim": params.dim})
    result.metrics.update({"documents_embedded": docs, "chunks": sum(r["chunks"] for r in parts),
                           "empty_documents": sum(r["empty"] for r in parts), "dim": params.dim})
    return result


def read_vectors(embed_dir: str | Path) -> tuple[list[str], np.ndarray]:
    """(doc_ids, vectors) of an embed stage's output, in shard order."""
    paths = sorted((Path(embed_dir) / "vectors").glob("*.parquet"))
    if not paths:
        raise FileNotFoundError(f"{embed_dir}/vectors holds no vectors: run the embed stage first")
    table = pa.concat_tables([pq.read_table(p) for p in paths])
    dim = table.schema.field("vector").type.list_size
    flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return table.column("doc_id").to_pylist(), flat.reshape(-1, dim).astype(np.float32, copy=False)
