"""Boosted decision trees as tensor ops, so a tree probe runs inside the served graph.

Every tree's nodes are laid out in one set of flat arrays (node ids are global).
A leaf points to itself, so ``depth`` steps of "go left if x[feature] <= threshold,
else right" bring every row to its leaf in every tree at once; the raw score is the
bias plus the sum of the leaves' values (gradient boosting's log-odds for a
classifier). Only gathers, a comparison and a sum: it exports to ONNX with a dynamic
batch axis. training/evaluate/probe.py fits the trees (scikit-learn) and fills the
arrays.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

TREE_KEYS = ("feature", "threshold", "left", "right", "value", "roots", "depth", "bias")


class TreeEnsemble(nn.Module):
    """features (B, F) float32 -> raw score (B, 1)."""

    feature: Tensor  # (N,) int64 feature index of each node (0 at leaves)
    threshold: Tensor  # (N,) float32: go left when x <= threshold
    left: Tensor  # (N,) int64 global node id; a leaf points to itself
    right: Tensor  # (N,) int64
    value: Tensor  # (N,) float32 leaf value (learning rate included), 0 elsewhere
    roots: Tensor  # (n_trees,) int64
    depth: Tensor  # () int64 steps from a root to its deepest leaf
    bias: Tensor  # () float32 the initial raw score

    def __init__(self, n_nodes: int, n_trees: int, depth: int) -> None:
        super().__init__()
        self.n_steps = depth
        for name, n, dtype in (
            ("feature", n_nodes, torch.long),
            ("threshold", n_nodes, torch.float32),
            ("left", n_nodes, torch.long),
            ("right", n_nodes, torch.long),
            ("value", n_nodes, torch.float32),
            ("roots", n_trees, torch.long),
        ):
            self.register_buffer(name, torch.zeros(n, dtype=dtype))
        self.register_buffer("depth", torch.tensor(depth, dtype=torch.long))
        self.register_buffer("bias", torch.tensor(0.0))

    @classmethod
    def from_state(cls, state: dict[str, Tensor]) -> TreeEnsemble:
        """The module that ``state`` (its state_dict) fills."""
        trees = cls(len(state["feature"]), len(state["roots"]), int(state["depth"]))
        trees.load_state_dict(state)
        return trees

    def leaves(self, x: Tensor) -> Tensor:
        """features (B, F) -> each tree's leaf value (B, n_trees)."""
        node = self.roots.unsqueeze(0).expand(x.shape[0], -1)  # (B, n_trees)
        for _ in range(self.n_steps):
            go_left = x.gather(1, self.feature[node]) <= self.threshold[node]
            node = torch.where(go_left, self.left[node], self.right[node])
        return self.value[node]

    def forward(self, x: Tensor) -> Tensor:
        return (self.leaves(x).sum(1) + self.bias).unsqueeze(1)
