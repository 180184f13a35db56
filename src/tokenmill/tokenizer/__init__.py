"""The tokenizer: a lossless SentencePiece model trained on a mixture-weighted sample, its exact Hugging Face
twin, the Tokenizer every later stage encodes with, and the per-bucket audit of how well it fits.

    params = params.Tokenizer.resolve({"vocab_size": 16384})   # the stage's section (tokenizer/params.py)
    meta = train_tokenizer({"web": [...], "code": [...]}, {"web": 0.7, "code": 0.3}, params, out_dir)
    tok = Tokenizer(out_dir)            # encode / encode_batch / decode / eos_id / dtype
    report = audit(tok, {"web": [...], "code": [...]})

Ids: 0 <unk>, 1 <s>, 2 </s> (end of text, between documents), 3 <pad>, 4.. <reserved_N>; no <s> is added
when encoding. See train.py for the settings and hf.py for the Hugging Face conversion.
"""

from .audit import audit
from .core import Tokenizer, token_dtype
from .hf import build_tokenizer, hf_tokenizer, save_hf, transformers_tokenizer
from .sample import parquet_source, plan_sample, write_sample
from .stage import AUDIT_BYTES, train_and_audit
from .train import train_tokenizer

__all__ = ["AUDIT_BYTES", "Tokenizer", "audit", "build_tokenizer", "hf_tokenizer", "parquet_source", "plan_sample",
           "save_hf", "token_dtype", "train_tokenizer", "train_and_audit",
           "transformers_tokenizer", "write_sample"]
