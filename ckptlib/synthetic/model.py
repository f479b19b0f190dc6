"""The synthetic transformer's modules: pre-norm attention (qkv, SDPA, out) and a GELU feed-forward,
optionally with the pre-FFN norm inside the feed-forward region (NOTE [ The docs' synthetic block ])."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from . import SyntheticShape


class Attention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float, **factory):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(width, 3 * width, **factory)
        self.out = nn.Linear(width, width, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Sequential):
    def __init__(self, width: int, mlp_ratio: int, dropout: float, **factory):
        super().__init__(
            nn.Linear(width, mlp_ratio * width, **factory),
            nn.GELU(approximate="tanh"),
            nn.Linear(mlp_ratio * width, width, **factory),
            nn.Dropout(dropout),
        )


class NormedFeedForward(nn.Module):
    """The pre-FFN norm and the MLP as one module: what the docs' FFN checkpoint covers."""

    def __init__(self, width: int, mlp_ratio: int, dropout: float, **factory):
        super().__init__()
        self.norm = nn.LayerNorm(width, **factory)
        self.mlp = FeedForward(width, mlp_ratio, dropout, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x))


class Block(nn.Module):
    def __init__(self, shape: SyntheticShape, **factory):
        super().__init__()
        self.norm1 = nn.LayerNorm(shape.width, **factory)
        self.attn = Attention(shape.width, shape.heads, shape.dropout, **factory)
        if shape.ffn_norm:  # NOTE [ The docs' synthetic block ]
            self.norm2 = nn.Identity()
            self.ff = NormedFeedForward(shape.width, shape.mlp_ratio, shape.dropout, **factory)
        else:
            self.norm2 = nn.LayerNorm(shape.width, **factory)
            self.ff = FeedForward(shape.width, shape.mlp_ratio, shape.dropout, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class SyntheticTransformer(nn.Module):
    def __init__(self, shape: SyntheticShape, **factory):
        super().__init__()
        self.blocks = nn.ModuleList(Block(shape, **factory) for _ in range(shape.depth))
        self.norm_out = nn.LayerNorm(shape.width, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm_out(x)
