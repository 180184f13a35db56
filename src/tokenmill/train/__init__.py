"""Training: a Llama-style model trained from the mixture plan, one code path for one CPU process, FSDP2 +
tensor parallel on gloo, and NCCL on GPU nodes (contract 10 of DESIGN.md).

    config.py    the `model` and `train` sections (pydantic, strict) and model_size (torch-free)
    model.py     the plain model: no parallelism, no torch.distributed
    parallel.py  DeviceMesh, tensor parallel, activation checkpointing, compile, FSDP2, applied from outside
    data.py      the plan's token stream, global batches sliced per data-parallel rank, held-out batches
    schedule.py  learning-rate schedules
    metrics.py   MFU, peak FLOPs per device
    checkpoint.py  atomic DCP checkpoints, resume under any layout
    trainer.py   Trainer: the model, its layout, the optimizer and the loader of one rank; held-out and benchmark scoring
    loop.py      train(run_cfg, data_root, out_dir, live_dir) -> summary; the step (train_step) and its cadence
    duties.py    the run's periodic duties the loop calls at its hooks (evaluation, checkpoints, rollback, ...)
    runstate.py  the run state a checkpoint carries

Importing this package does not import torch (the mixture stage uses config.model_size).
"""
