"""Batched k-means: scikit-learn's objective, a split's centres the same in a batch as alone and in any
chunking, determinism, Lloyd's fixed point, empty clusters, dtypes and bad input."""

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans

from gpstudy import numerics
from gpstudy.methods.inducing import _closest_centre, _cluster_means, kmeans
from gpstudy.runtime.host_sync import HostSyncCounter

DTYPE = numerics.DEFAULT_DTYPE
SEEDS = range(5)


def mixture(num_points: int, dim: int, num_clusters: int, spread: float, seed: int) -> torch.Tensor:
    """Points ``[N, D]`` of a mixture of anisotropic Gaussians with centres ``spread`` apart (on average)."""
    generator = torch.Generator().manual_seed(seed)
    centres = spread * torch.randn(num_clusters, dim, generator=generator, dtype=DTYPE)
    scales = torch.rand(num_clusters, 1, dim, generator=generator, dtype=DTYPE) + 0.2
    members = torch.randint(num_clusters, (num_points,), generator=generator)
    return centres[members] + scales[members, 0] * torch.randn(num_points, dim, generator=generator, dtype=DTYPE)


def heavy_tailed(num_points: int, dim: int, seed: int) -> torch.Tensor:
    """Points ``[N, D]`` of a Gaussian scale mixture (log-normal scales): a dense core and far outliers."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.randn(num_points, 1, generator=generator, dtype=DTYPE).exp()
    return scales * torch.randn(num_points, dim, generator=generator, dtype=DTYPE)


def inertia(x: torch.Tensor, centres: torch.Tensor) -> float:
    """Sum over the points of the squared distance to the closest centre."""
    return torch.cdist(x, centres).square().min(-1).values.sum().item()


@pytest.mark.parametrize(
    "x, num_centres",
    [
        (mixture(600, 4, 6, 3.0, seed=0), 10),  # more centres than clusters: where the runs differ
        (mixture(800, 2, 3, 0.5, seed=1), 30),  # overlapping clusters, a dense cover
        (heavy_tailed(500, 3, seed=2), 25),
    ],
)
def test_inertia_is_that_of_scikit_learn(x, num_centres):
    """Mean inertia over 5 seeds within 2% of scikit-learn's KMeans (its defaults: one greedy k-means++
    run, then Lloyd's iterations); one seed's ratio varies by a few percent either way."""
    ours = np.mean([inertia(x, kmeans(x, num_centres, torch.Generator().manual_seed(s))) for s in SEEDS])
    theirs = np.mean([KMeans(num_centres, random_state=s).fit(x.numpy()).inertia_ for s in SEEDS])
    assert 0.95 < ours / theirs <= 1.02


def test_finds_separated_clusters_at_their_means():
    """On well separated clusters the centres are the clusters' means, Lloyd's exact fixed point."""
    x = mixture(300, 3, 4, 20.0, seed=2)
    centres = kmeans(x, 4, torch.Generator().manual_seed(0))
    labels = torch.cdist(x, centres).argmin(-1)
    assert labels.unique().numel() == 4
    means = torch.stack([x[labels == m].mean(0) for m in range(4)])
    torch.testing.assert_close(centres, means, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_split_gets_its_centres_alone(dtype):
    xs = torch.stack([mixture(400, 3, 5, 2.0, seed=s) for s in range(3)]).to(dtype)  # [3, N, D]
    batched = kmeans(xs, 12, [torch.Generator().manual_seed(10 + s) for s in range(3)])
    assert batched.shape == (3, 12, 3) and batched.dtype == dtype
    for s in range(3):
        assert torch.equal(batched[s], kmeans(xs[s], 12, torch.Generator().manual_seed(10 + s)))


@pytest.mark.parametrize("entries", [7, 7 * 40, numerics.KMEANS_CHUNK["cuda"]])
def test_chunks_do_not_change_the_centres(monkeypatch, entries):
    """Distances held 7 at a time (one point per chunk), 280 (40 points) or as many as a GPU holds give the
    CPU's centres bit for bit."""
    xs = torch.stack([mixture(200, 2, 4, 2.0, seed=s) for s in range(2)])
    on_the_cpu = kmeans(xs, 7, [torch.Generator().manual_seed(s) for s in range(2)])
    monkeypatch.setitem(numerics.KMEANS_CHUNK, "cpu", entries)
    assert torch.equal(kmeans(xs, 7, [torch.Generator().manual_seed(s) for s in range(2)]), on_the_cpu)


def test_a_gpu_computes_a_lloyd_iteration_in_a_few_chunks(monkeypatch):
    """At protein's size (20 splits of 41157 points, D = 9, M = 500) the CPU's chunk of distances made 1583
    distance products a Lloyd iteration, each a few kernel launches; a GPU's (``meta`` stands for one: no
    values, no time) holds the iteration in a few chunks."""
    products, baddbmm = [], torch.baddbmm

    def counted(*args, **kwargs):
        products.append(args[1].shape)  # a chunk of points
        return baddbmm(*args, **kwargs)

    monkeypatch.setattr(torch, "baddbmm", counted)
    x = torch.empty(20, 41157, 9, dtype=DTYPE, device="meta")
    labels = _closest_centre(x, x[:, :500])
    assert labels.shape == (20, 41157) and 1 <= len(products) <= 16


def test_the_seed_decides_the_centres():
    x = mixture(300, 2, 8, 1.0, seed=3)
    first = kmeans(x, 10, torch.Generator().manual_seed(4))
    assert torch.equal(first, kmeans(x, 10, torch.Generator().manual_seed(4)))
    assert not torch.equal(first, kmeans(x, 10, torch.Generator().manual_seed(5)))


def test_float32_matches_float64():
    """float32 draws other uniforms than float64, so the clusters are separated enough for both to find them."""
    x = mixture(500, 3, 5, 20.0, seed=4) + 1000.0  # far from the origin
    double = kmeans(x, 5, torch.Generator().manual_seed(0))
    single = kmeans(x.float(), 5, torch.Generator().manual_seed(0))
    assert single.dtype == torch.float32
    single, double = single[single[:, 0].argsort()], double[double[:, 0].argsort()]  # drawn in other orders
    torch.testing.assert_close(single.double(), double, rtol=0, atol=1e-3)


def test_as_many_centres_as_points_are_the_points():
    x = mixture(15, 2, 3, 1.0, seed=5)
    centres = kmeans(x, 15, torch.Generator().manual_seed(0))
    torch.testing.assert_close(centres[torch.cdist(x, centres).argmin(-1)], x, rtol=0, atol=1e-12)


def test_an_empty_cluster_keeps_its_centre():
    x = torch.tensor([[[0.0], [2.0], [10.0]]], dtype=DTYPE)  # [1, 3, 1]
    centres = torch.tensor([[[1.0], [5.0], [9.0]]], dtype=DTYPE)
    means = _cluster_means(x, torch.tensor([[0, 0, 2]]), centres)
    assert means.flatten().tolist() == [1.0, 5.0, 10.0]


def test_bad_input_is_refused():
    x = mixture(10, 2, 2, 1.0, seed=6)
    with pytest.raises(ValueError, match="11 centres of 10 points"):
        kmeans(x, 11, torch.Generator())
    with pytest.raises(ValueError, match="one generator per split"):
        kmeans(x.expand(2, 10, 2), 3, torch.Generator())


def test_a_lloyd_iteration_reads_nothing_on_the_host():
    """The cluster means (every iteration) synchronise nothing: k-means reads on the host only every
    ``KMEANS_CHECK_EVERY`` iterations, as its docstring says (a bincount here was one sync per iteration)."""
    x = mixture(100, 2, 3, 3.0, seed=7).unsqueeze(0)
    labels = torch.randint(4, (1, 100), generator=torch.Generator().manual_seed(0))
    with HostSyncCounter() as counter:
        _cluster_means(x, labels, x[:, :4])
    assert not counter.events, counter.summary()
