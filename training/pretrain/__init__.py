"""Self-supervised SC-JEPA pre-training: the run's config, losses, EMA target,
checkpoints, DDP helpers and the loop itself (``scjepa pretrain``, train.py).

May import model/ and training.data; nothing from evaluate/, bench/, demo/ or service/.
"""
