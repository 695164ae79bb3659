"""Views for self-supervised pretraining: tabular corruption and light image augmentation.

Why these: FedHSSL (after VIME/SCARF) corrupts tabular rows by replacing 30% of the
features with random values drawn uniformly in each feature's [min, max] over the party's
own training rows; a categorical field (a one-hot group of the dataset's
``feature_groups``) is replaced by an extra "masked" token instead — here one extra
indicator column per group, 0 on clean inputs, 1 with the group's one-hot zeroed when
masked. Image halves get a random affine shift/scale plus pixel noise, built from torch
ops (torchvision cannot be imported beside this machine's torch build); ``ImageLayout``'s
``aug="strong"`` (an option, not the default) adds rotation, anisotropic scale, a larger
shift, contrast jitter, cutout and more noise.
Every draw comes from the party's own ``torch.Generator``: same seed, same views.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

CORRUPT_FRACTION = 0.3


@dataclass(frozen=True)
class TabularLayout:
    """Where a party's fields are: one tuple of column positions per original field."""

    fields: tuple[tuple[int, ...], ...]  # positions in the party's own columns
    low: np.ndarray  # (d,) per-column min over the party's training rows (scaled)
    high: np.ndarray  # (d,) per-column max
    off_value: np.ndarray  # (d,) the scaled value of a one-hot 0 (what "not this level" is)

    @property
    def categorical(self) -> tuple[tuple[int, ...], ...]:
        """Fields with more than one column are one-hot groups (a 1-column categorical
        cannot be told from a number and is treated as numeric)."""
        return tuple(f for f in self.fields if len(f) > 1)

    @property
    def n_extra(self) -> int:
        return len(self.categorical)


IMAGE_AUGS = ("light", "strong")


@dataclass(frozen=True)
class ImageLayout:
    shape: tuple[int, int]  # (h, w) of the party's image part
    aug: str = "light"  # IMAGE_AUGS: "light" (default) or "strong" (``augment_image_strong``)


def party_fields(
    groups: tuple[tuple[int, ...], ...], columns: np.ndarray
) -> tuple[tuple[int, ...], ...]:
    """The dataset's feature groups that fall in ``columns``, as positions in them."""
    where = {int(c): i for i, c in enumerate(columns)}
    out = []
    for group in groups:
        inside = [where[c] for c in group if c in where]
        if inside:
            out.append(tuple(inside))
    return tuple(out)


def with_mask_columns(X: torch.Tensor, layout: TabularLayout | ImageLayout | None) -> torch.Tensor:
    """Clean inputs (N, d) -> (N, d + n_extra): the mask-token columns, all 0."""
    if not isinstance(layout, TabularLayout) or layout.n_extra == 0:
        return X
    return torch.cat([X, X.new_zeros(X.shape[0], layout.n_extra)], dim=1)


def corrupt_tabular(x: torch.Tensor, layout: TabularLayout, gen: torch.Generator) -> torch.Tensor:
    """(B, d) clean rows -> (B, d + n_extra) with ~30% of the fields of each row replaced."""
    b = x.shape[0]
    n_fields = len(layout.fields)
    hit = torch.rand((b, n_fields), generator=gen) < CORRUPT_FRACTION  # (B, F)
    out = x.clone()
    low = torch.as_tensor(layout.low, dtype=x.dtype)
    high = torch.as_tensor(layout.high, dtype=x.dtype)
    uniform = low + (high - low) * torch.rand(x.shape, generator=gen)  # (B, d)
    col_hit = torch.zeros_like(x, dtype=torch.bool)
    extra = x.new_zeros(b, layout.n_extra)
    off = torch.as_tensor(layout.off_value, dtype=x.dtype)
    cat_index = 0
    for f, cols in enumerate(layout.fields):
        if len(cols) > 1:  # categorical: the one-hot goes "off", the mask token goes on
            rows = hit[:, f]
            out[rows.nonzero(as_tuple=True)[0].unsqueeze(1), torch.tensor(cols)] = off[list(cols)]
            extra[:, cat_index] = rows.to(x.dtype)
            cat_index += 1
        else:
            col_hit[:, cols[0]] = hit[:, f]
    out = torch.where(col_hit, uniform, out)
    return torch.cat([out, extra], dim=1) if layout.n_extra else out


def augment_image(x: torch.Tensor, layout: ImageLayout, gen: torch.Generator) -> torch.Tensor:
    """(B, h*w) pixels in [0, 1] -> (B, h*w): random shift (±10%), scale (0.9–1.1), noise."""
    h, w = layout.shape
    b = x.shape[0]
    img = x.view(b, 1, h, w)
    scale = 0.9 + 0.2 * torch.rand(b, generator=gen)
    shift = 0.2 * torch.rand((b, 2), generator=gen) - 0.1
    theta = torch.zeros(b, 2, 3, dtype=x.dtype)
    theta[:, 0, 0] = scale
    theta[:, 1, 1] = scale
    theta[:, :, 2] = shift
    grid = F.affine_grid(theta, [b, 1, h, w], align_corners=False)
    moved = F.grid_sample(img, grid, padding_mode="zeros", align_corners=False)
    noisy = moved + 0.05 * torch.randn(moved.shape, generator=gen)
    return noisy.reshape(b, h * w)


def augment_image_strong(
    x: torch.Tensor, layout: ImageLayout, gen: torch.Generator
) -> torch.Tensor:
    """(B, h*w) pixels -> (B, h*w): rotation ±15°, scale 0.8–1.2 per axis, shift ±15%
    (in grid units), contrast x0.6–1.4, a cutout rectangle (up to h/2 x w/2) on half the
    rows, noise 0.1."""
    h, w = layout.shape
    b = x.shape[0]
    angle = (2 * torch.rand(b, generator=gen) - 1) * math.radians(15)
    sx = 0.8 + 0.4 * torch.rand(b, generator=gen)
    sy = 0.8 + 0.4 * torch.rand(b, generator=gen)
    shift = 0.3 * torch.rand((b, 2), generator=gen) - 0.15
    theta = torch.zeros(b, 2, 3, dtype=x.dtype)  # (B, 2, 3)
    theta[:, 0, 0], theta[:, 0, 1] = sx * torch.cos(angle), -sx * torch.sin(angle)
    theta[:, 1, 0], theta[:, 1, 1] = sy * torch.sin(angle), sy * torch.cos(angle)
    theta[:, :, 2] = shift
    grid = F.affine_grid(theta, [b, 1, h, w], align_corners=False)
    img = F.grid_sample(x.view(b, 1, h, w), grid, padding_mode="zeros", align_corners=False)
    img = img * (0.6 + 0.8 * torch.rand((b, 1, 1, 1), generator=gen))  # (B, 1, h, w)
    size = torch.rand((b, 2), generator=gen) * torch.tensor([h / 2, w / 2])
    corner = torch.rand((b, 2), generator=gen) * torch.tensor([h, w])
    on = torch.rand(b, generator=gen) < 0.5
    rows = torch.arange(h).view(1, h, 1)
    cols = torch.arange(w).view(1, 1, w)
    y0, x0 = corner[:, 0].view(b, 1, 1), corner[:, 1].view(b, 1, 1)
    cut = (rows >= y0) & (rows < y0 + size[:, 0].view(b, 1, 1).floor())
    cut = cut & (cols >= x0) & (cols < x0 + size[:, 1].view(b, 1, 1).floor())
    img = img * ~(cut & on.view(b, 1, 1)).unsqueeze(1)
    noisy = img + 0.1 * torch.randn(img.shape, generator=gen)
    return noisy.reshape(b, h * w)


def make_view(
    x: torch.Tensor, layout: TabularLayout | ImageLayout, gen: torch.Generator
) -> torch.Tensor:
    """One augmented view of the clean rows ``x`` (B, d), in the encoder's input width."""
    if isinstance(layout, ImageLayout):
        if layout.aug == "strong":
            return augment_image_strong(x, layout, gen)
        return augment_image(x, layout, gen)
    return corrupt_tabular(x, layout, gen)
