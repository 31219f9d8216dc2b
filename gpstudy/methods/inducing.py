"""Where inducing points start: k-means centres of the training inputs, or training inputs drawn at random
(``INDUCING_INITS``), for all splits at once.

The k-means is batched in torch: greedy k-means++ seeding, then Lloyd's iterations.

The algorithm is scikit-learn's ``KMeans`` with its defaults (one run, greedy k-means++ with
2 + floor(ln M) candidates per centre, Lloyd's iterations up to ``numerics.KMEANS_MAX_ITER``,
stopping when the squared shift of the centres is at most ``numerics.KMEANS_TOL`` times the mean
per-feature variance), written as tensor operations over a leading split dimension so that it runs
on the data's device. Two choices differ from scikit-learn: an empty cluster keeps its centre (rather
than moving to the farthest point: rare after k-means++, and it needs no data-dependent branch), and
the convergence is read on the host only every ``numerics.KMEANS_CHECK_EVERY`` iterations (each split
stops updating at its own convergence, on the device, so its centres do not depend on the others).

Each split's draws come from its own generator, a fixed number of them, so a split gets the same
centres in a batch as alone. Lloyd's distances to the centres are computed in chunks of points of at
most ``numerics.KMEANS_CHUNK`` entries over the whole batch, sized by device type (a CPU's small, a GPU's
large: each chunk is kernel launches); k-means++ holds B x L x N distances (L = 2 + floor(ln M)
candidates). On a GPU the sums of a cluster's points (``index_add_``) are bitwise
repeatable only under ``torch.use_deterministic_algorithms``.
"""

import logging
import math
from collections.abc import Callable

import torch
from torch import Tensor

from gpstudy import generators as draws
from gpstudy import numerics

logger = logging.getLogger(__name__)


def kmeans(x: Tensor, num_centres: int, generators: draws.Generators) -> Tensor:
    """k-means centres ``[*batch, M, D]`` of ``x`` ``[*batch, N, D]``, split s seeded by generator s.

    ``M = num_centres`` must be between 1 and N; the centres have ``x``'s device and dtype.
    """
    *batch, num_points, dim = x.shape
    if tuple(batch) != draws.batch_shape(generators):
        raise ValueError(
            f"k-means of x {tuple(x.shape)} needs one generator per split: batch {tuple(batch)}, "
            f"generators {draws.batch_shape(generators)}"
        )
    if not 1 <= num_centres <= num_points:
        raise ValueError(f"k-means needs 1 <= centres <= points: {num_centres} centres of {num_points} points")
    points = x.detach().reshape(-1, num_points, dim)  # [B, N, D]
    mean = points.mean(-2, keepdim=True)
    points = points - mean  # centred: ||x||^2 - 2 x.c + ||c||^2 loses less to cancellation
    trials = 2 + int(math.log(num_centres))
    uniforms = draws.rand((num_centres * trials,), generators, x).reshape(len(points), num_centres, trials)
    centres = _greedy_kmeans_plus_plus(points, uniforms)
    tolerance = numerics.KMEANS_TOL * points.var(-2, correction=0).mean(-1)  # [B]
    centres = _lloyd(points, centres, tolerance)
    return (centres + mean).reshape(*batch, num_centres, dim)


def _greedy_kmeans_plus_plus(x: Tensor, uniforms: Tensor) -> Tensor:
    """Greedy k-means++ (Arthur and Vassilvitskii 2007; scikit-learn's ``_kmeans_plusplus``): centres
    ``[B, M, D]`` of ``x`` ``[B, N, D]``, from U(0, 1) draws ``uniforms`` ``[B, M, L]``.

    The first centre is the point at ``floor(N u)``; each next one is the best, by the potential
    sum_n min(d_n, |x_n - c|^2), of L candidates drawn with probability proportional to d_n, the squared
    distance of x_n to its closest centre so far.
    """
    num_points = x.shape[-2]
    squared_norms = x.square().sum(-1)  # [B, N]
    columns = x.mT.contiguous()  # [B, D, N]: a contiguous right factor, several times faster on a CPU
    first = (uniforms[:, 0, :1] * num_points).long().clamp(max=num_points - 1)  # [B, 1]
    chosen = [first]
    closest = _squared_distances(columns, squared_norms, draws.take_rows(x, first)).squeeze(-2)  # [B, N]
    distances = x.new_empty(len(x), uniforms.shape[-1], num_points)  # [B, L, N], one buffer for every step
    for step_uniforms in uniforms[:, 1:].unbind(1):  # [B, L]
        cumulative = closest.cumsum(-1)
        candidates = torch.searchsorted(cumulative, step_uniforms * cumulative[:, -1:]).clamp(max=num_points - 1)
        _squared_distances(columns, squared_norms, draws.take_rows(x, candidates), out=distances)
        torch.minimum(closest.unsqueeze(-2), distances, out=distances)
        best = distances.sum(-1).argmin(-1, keepdim=True)  # [B, 1]
        chosen.append(candidates.gather(-1, best))
        closest = distances.gather(-2, best.unsqueeze(-1).expand(-1, 1, num_points)).squeeze(-2)
    return draws.take_rows(x, torch.cat(chosen, -1))


def _squared_distances(columns: Tensor, squared_norms: Tensor, centres: Tensor, out: Tensor | None = None) -> Tensor:
    """|x_n - c_m|^2 ``[B, M, N]`` of points x given as ``columns`` ``[B, D, N]`` (``squared_norms``
    |x_n|^2 ``[B, N]``) to ``centres`` ``[B, M, D]``, for a few centres (the k-means++ candidates), into
    ``out`` if given (a CPU pays to map fresh pages for every large new tensor)."""
    distances = torch.baddbmm(squared_norms.unsqueeze(-2), centres, columns, alpha=-2, out=out)  # |x|^2 - 2 c.x
    return distances.add_(centres.square().sum(-1, keepdim=True)).clamp_min_(0)


def _lloyd(x: Tensor, centres: Tensor, tolerance: Tensor) -> Tensor:
    """Lloyd's iterations from ``centres`` ``[B, M, D]``: each point to its closest centre, each centre to
    the mean of its points. Split b stops at the first iteration whose squared shift of the centres is at
    most ``tolerance[b]``, or after ``numerics.KMEANS_MAX_ITER`` iterations.

    A stopped split keeps its centres (``torch.where``, on the device); at each check on the host the
    stopped splits leave the batch, so a batch costs the sum of its splits' iterations, not the most.
    """
    centres = centres.clone()
    moving = torch.arange(len(x), device=x.device)  # the splits not stopped at the last check
    points, current, limit = x, centres, tolerance
    done = torch.zeros(len(x), dtype=torch.bool, device=x.device)
    for iteration in range(numerics.KMEANS_MAX_ITER):
        moved = _cluster_means(points, _closest_centre(points, current), current)
        shift = (moved - current).square().sum((-2, -1))
        current = torch.where(done[:, None, None], current, moved)
        done = done | (shift <= limit)
        if (iteration + 1) % numerics.KMEANS_CHECK_EVERY == 0:
            centres[moving] = current
            if bool(done.all()):
                return centres
            points, current, limit, moving = points[~done], current[~done], limit[~done], moving[~done]
            done = done[~done]
    centres[moving] = current
    return centres


def _closest_centre(x: Tensor, centres: Tensor) -> Tensor:
    """The index ``[B, N]`` of each point's closest centre: argmin_m |c_m|^2 - 2 x.c_m, in chunks of points
    of at most ``numerics.KMEANS_CHUNK[device type]`` distances over the batch (another device: cuda's)."""
    batch, num_points, _ = x.shape
    entries = numerics.KMEANS_CHUNK.get(x.device.type, numerics.KMEANS_CHUNK["cuda"])
    rows = max(1, entries // (batch * centres.shape[-2]))
    squared_norms = centres.square().sum(-1).unsqueeze(-2)  # [B, 1, M]
    columns = centres.mT
    return torch.cat(
        [torch.baddbmm(squared_norms, chunk, columns, alpha=-2).argmin(-1) for chunk in x.split(rows, dim=-2)], dim=-1
    )


def _cluster_means(x: Tensor, labels: Tensor, centres: Tensor) -> Tensor:
    """The mean ``[B, M, D]`` of the points ``x`` ``[B, N, D]`` of each cluster ``labels`` ``[B, N]``; an
    empty cluster keeps its centre from ``centres``."""
    batch, num_centres, dim = centres.shape
    flat = (labels + num_centres * torch.arange(batch, device=x.device).unsqueeze(-1)).flatten()  # [B N]
    sums = x.new_zeros(batch * num_centres, dim).index_add_(0, flat, x.reshape(-1, dim))
    counts = (
        x.new_zeros(batch * num_centres).index_add_(0, flat, x.new_ones(flat.shape)).unsqueeze(-1)
    )  # no bincount: it syncs
    means = sums / counts.clamp_min(1)
    return torch.where(counts > 0, means, centres.reshape(-1, dim)).reshape(batch, num_centres, dim)


def _capped(num_points: int, requested: int) -> int:
    """``min(requested, num_points)``, with a warning when fewer points than asked for exist."""
    if requested > num_points:
        logger.warning("%d inducing points requested but only %d training points", requested, num_points)
    return min(requested, num_points)


def kmeans_centres(x: Tensor, num_centres: int, generators: draws.Generators) -> Tensor:
    """k-means centres ``[*batch, min(num_centres, N), D]`` of ``x`` ``[*batch, N, D]`` (:func:`kmeans`),
    each split seeded by its own generator, on ``x``'s device.

    k-means cannot place more centres than points: with num_centres > N it returns N centres (the
    training inputs themselves) and logs a warning.
    """
    return kmeans(x, _capped(x.shape[-2], num_centres), generators)


def training_points(x: Tensor, num_points: int, generators: draws.Generators) -> Tensor:
    """``min(num_points, N)`` distinct rows ``[*batch, M, D]`` of ``x`` ``[*batch, N, D]``: the first of a
    random permutation drawn by each split's own generator (Garriga-Alonso et al. 2019's fixed inducing
    images; the GPNet authors' SVGP code)."""
    rows = draws.randperm(x.shape[-2], generators, x.device)[..., : _capped(x.shape[-2], num_points)]
    return draws.take_rows(x, rows)


INDUCING_INITS: dict[str, Callable[[Tensor, int, draws.Generators], Tensor]] = {  # Z's start, by name
    "kmeans": kmeans_centres,
    "training_points": training_points,
}
