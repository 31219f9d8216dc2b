"""Every inference network passes the same battery; RFE's initialization and implied prior."""

import math

import pytest
import torch

from gpstudy import generators as draws
from gpstudy import numerics
from gpstudy.kernels import RBF, ArcCosine, Kernel, build_kernel
from gpstudy.kernels.cnngp import CNNGP
from gpstudy.linalg import HALVES_FROM, inverse_positive, positive
from gpstudy.nets import NETWORKS as REGISTERED
from gpstudy.nets import RFE, InferenceNetwork
from gpstudy.nets.block_tril import BlockTril

DTYPE = numerics.DEFAULT_DTYPE


def build_kernel_2d(kernel: tuple[str, dict], lengthscale=(0.5, 2.0), variance: float = 1.7) -> Kernel:
    """The kernel (registry name, options) on 2 inputs with these hyperparameters."""
    kernel = build_kernel(kernel[0], len(lengthscale), kernel[1])
    with torch.no_grad():
        kernel.raw_lengthscale.copy_(inverse_positive(torch.tensor(lengthscale, dtype=DTYPE)))
        kernel.raw_variance.copy_(inverse_positive(torch.tensor(variance, dtype=DTYPE)))
    return kernel


def build_rfe(
    hidden_units: int = 10,
    lengthscale=(0.5, 2.0),
    variance: float = 1.7,
    seed: int = 0,
    kernel: tuple[str, dict] = ("rbf", {}),
) -> RFE:
    return RFE(
        build_kernel_2d(kernel, lengthscale, variance),
        hidden_units,
        torch.Generator().manual_seed(seed),
        live_variance=False,
    )


NETWORKS = {  # every network with a 2-D input
    "rfe": build_rfe,
    "rfe_matern52": lambda: build_rfe(kernel=("matern52", {})),
    "rfe_arccos1": lambda: build_rfe(kernel=("arccos", {"degree": 1})),
}


def output_covariance(network: RFE, x: torch.Tensor) -> torch.Tensor:
    """(Phi L)(Phi L)^T, the network's covariance without jitter."""
    factor = network(x)[1]
    return factor @ factor.mT


def prior_covariance(network: RFE, x: torch.Tensor) -> torch.Tensor:
    """phi(x) phi(x)^T: the network's covariance with q(w) = N(0, I), the random-feature prior."""
    phi = network.features(x)
    return phi @ phi.mT


@pytest.fixture
def inputs() -> torch.Tensor:
    return torch.randn(6, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_shapes_covariance_and_marginals(name, inputs):
    network: InferenceNetwork = NETWORKS[name]()
    mean, factor = network(inputs)
    assert mean.shape == (6,) and factor.shape[0] == 6 and factor.dim() == 2
    _, cov = network.mean_and_covariance(inputs)
    torch.testing.assert_close(cov, factor @ factor.mT + numerics.JITTER * torch.eye(6, dtype=DTYPE))
    assert torch.linalg.eigvalsh(cov).min() > 0
    torch.testing.assert_close(network.marginal_variance(inputs), cov.diagonal())
    marginal_mean, _ = network.marginals(inputs)
    torch.testing.assert_close(marginal_mean, mean)


@pytest.mark.parametrize(
    "head_rows, tail_rows", [(0, 9), (5, 9), (HALVES_FROM - 1, 9), (HALVES_FROM + 1, 40), (300, 150), (500, 500)]
)
def test_stacked_covariance_equals_the_covariance_of_the_stacked_factor(head_rows, tail_rows):
    """GPNet's q_t over [X_B; X_M] from the loss's covariance over X_M (issue 39) equals ``covariance`` of the
    concatenated factor to 1e-12 relative (the Grams' products differ by rounding only); below ``HALVES_FROM``
    rows in all it is that computation, bit for bit. Two batch dimensions, the study's 2000 features."""
    network = build_rfe()
    generator = torch.Generator().manual_seed(4)
    head, tail = (torch.randn(2, 3, rows, 200, generator=generator, dtype=DTYPE) for rows in (head_rows, tail_rows))
    stacked = network.stacked_covariance(head, tail, network.covariance(tail))
    concatenated = network.covariance(torch.cat([head, tail], dim=-2))
    assert stacked.shape == concatenated.shape == (2, 3, head_rows + tail_rows, head_rows + tail_rows)
    assert torch.equal(stacked[..., :head_rows, head_rows:], stacked[..., head_rows:, :head_rows].mT)  # mirrored
    if head_rows + tail_rows < HALVES_FROM:
        assert torch.equal(stacked, concatenated)
    torch.testing.assert_close(stacked, concatenated, rtol=1e-12, atol=1e-12 * concatenated.abs().max().item())
    torch.testing.assert_close(
        stacked.diagonal(dim1=-2, dim2=-1), concatenated.diagonal(dim1=-2, dim2=-1), rtol=1e-13, atol=0
    )  # the jitter on every diagonal element, once


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_gradients_reach_every_parameter(name, inputs):
    network = NETWORKS[name]()
    mean, cov = network.mean_and_covariance(inputs)
    (mean.sum() + cov.sum()).backward()
    for parameter_name, parameter in network.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, parameter_name


def test_rfe_initialization_follows_the_study():
    network = build_rfe(hidden_units=1000, lengthscale=(0.5, 2.0), variance=1.7)
    torch.testing.assert_close(network.lengthscale, torch.tensor([0.5, 2.0], dtype=DTYPE))
    torch.testing.assert_close(network.prior_variance, torch.tensor(1.7, dtype=DTYPE))
    softplus_one = math.log1p(math.e)
    torch.testing.assert_close(network.weight_scale_tril, softplus_one * torch.eye(2000, dtype=DTYPE))
    assert network.weight_mean.shape == (2000,)
    assert 0.8e-3 < network.weight_mean.std() < 1.2e-3
    assert 0.8 < network.frequencies.std() < 1.2 and abs(network.frequencies.mean()) < 0.1
    assert not network.prior_variance.requires_grad


def test_rfe_prior_approaches_the_rbf_kernel_as_features_grow():
    lengthscale, variance = (0.7, 1.5), 2.0
    kernel = RBF(2, lengthscale=list(lengthscale), variance=variance)
    x = torch.randn(30, 2, generator=torch.Generator().manual_seed(2), dtype=DTYPE)
    errors = {}
    for hidden_units in (100, 2000):
        seed_errors = []
        for seed in range(5):
            network = build_rfe(hidden_units, lengthscale, variance, seed=seed)
            with torch.no_grad():  # q(w) = N(0, I): f = w^T phi(x) is the random-feature prior
                network.weight_mean.zero_()
                network.weight_scale = BlockTril(2 * hidden_units, 1.0, like=network.weight_mean)  # L = I
                _, cov = network.mean_and_covariance(x)
            seed_errors.append((cov - kernel(x)).abs().mean().item())
        errors[hidden_units] = sum(seed_errors) / len(seed_errors)
    assert errors[2000] < errors[100] / 2.5  # Monte Carlo rate: sqrt(20) = 4.5
    assert errors[2000] < 0.02 * variance


def test_rfe_prior_approaches_each_kernel(kernel_with_features):
    """Mean relative error of phi phi^T over 4 seeds: 2-6% at H = 2000 (a factor-2 kernel: 50-100%)."""
    kernel = build_kernel_2d(kernel_with_features, lengthscale=(0.7, 1.5), variance=2.0)
    x = 0.5 + torch.randn(8, 2, generator=torch.Generator().manual_seed(2), dtype=DTYPE)
    errors = {}
    with torch.no_grad():
        exact = kernel(x)
        for hidden_units in (100, 2000):
            networks = [
                RFE(kernel, hidden_units, torch.Generator().manual_seed(seed), live_variance=False) for seed in range(4)
            ]
            errors[hidden_units] = sum(
                (prior_covariance(network, x) - exact).abs().mean() / exact.abs().mean() for network in networks
            ) / len(networks)
    assert errors[2000] < errors[100] / 2.5  # Monte Carlo rate: sqrt(20) = 4.5
    assert errors[2000] < 0.1


def test_rfe_with_rbf_is_the_old_construction():
    """omega ~ N(0, 1) then m ~ N(0, 1e-3^2) from the same generator; phi = sqrt(s2 / H) [cos, sin]."""
    x = torch.randn(2, 6, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    kernel = RBF(2, lengthscale=[0.5, 2.0], variance=1.7, batch_shape=(2,))
    network = RFE(kernel, 30, [torch.Generator().manual_seed(s) for s in (0, 1)], live_variance=False)
    generators = [torch.Generator().manual_seed(s) for s in (0, 1)]
    lengthscale, variance = kernel.lengthscale.detach(), kernel.variance.detach()
    omega = draws.randn((2, 30), generators, lengthscale)
    weight_mean = 1e-3 * draws.randn((60,), generators, lengthscale)
    stored_lengthscale = positive(inverse_positive(lengthscale))  # l as the network stores it
    projection = x @ (omega / stored_lengthscale.unsqueeze(-1))
    features = (variance / 30).sqrt()[..., None, None] * torch.cat([projection.cos(), projection.sin()], dim=-1)
    assert torch.equal(network.frequencies, omega) and torch.equal(network.weight_mean, weight_mean)
    assert torch.equal(network.features(x), features)


def test_rfe_feature_count_follows_the_feature_map():
    network = build_rfe(hidden_units=30, kernel=("arccos", {"degree": 1}))
    assert network.frequencies.shape == (2, 30) and network.weight_mean.shape == (30,)
    assert network.weight_scale_tril.shape == (30, 30)
    assert network.features(torch.ones(4, 2, dtype=DTYPE)).shape == (4, 30)
    with pytest.raises(ValueError, match="ArcCosine of depth 2 has no random-feature map"):
        RFE(ArcCosine(2, degree=1, depth=2), 30, torch.Generator().manual_seed(0), live_variance=False)


def test_rfe_live_variance_reads_the_kernel(inputs):
    kernel = RBF(2, lengthscale=[0.5, 2.0], variance=1.7)
    live = RFE(kernel, 20, torch.Generator().manual_seed(0), live_variance=True)
    copied = RFE(kernel, 20, torch.Generator().manual_seed(0), live_variance=False)
    kernel_parameters = {id(parameter) for parameter in kernel.parameters()}
    assert not kernel_parameters & {id(parameter) for parameter in live.parameters()}
    assert set(live.state_dict()) == set(copied.state_dict()) - {"prior_variance"}
    before = output_covariance(live, inputs)
    torch.testing.assert_close(before, output_covariance(copied, inputs))
    with torch.no_grad():
        kernel.raw_variance.copy_(inverse_positive(torch.tensor(3 * 1.7, dtype=DTYPE)))
    torch.testing.assert_close(output_covariance(live, inputs), 3 * before)
    torch.testing.assert_close(output_covariance(copied, inputs), before)
    live(inputs)[1].sum().backward()  # the value only: hyperparameters learn from their own bound (section 3.3)
    assert kernel.raw_variance.grad is None and kernel.raw_lengthscale.grad is None


BUILT = {  # every registered network: a kernel on flat 4x4 images and network_options
    "rfe": (lambda: RBF(16), {}),
    "ntk": (lambda: CNNGP(16, image_shape=(1, 4, 4)), {"filters": [2], "strides": [2], "dense_units": 3}),
}


def test_every_registered_network_is_built_by_the_battery():
    assert set(BUILT) == set(REGISTERED) and all(REGISTERED[name].name == name for name in REGISTERED)


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_registered_network_builds_through_one_path(name):
    """``build(kernel, generators, latent_dim=..., hidden_units=..., live_variance=..., options=...)``; one latent:
    ``[n]``, C latents (where the network has several): ``[C, n]``; options checked against its schema."""
    network_class, (kernel, options) = REGISTERED[name], BUILT[name]
    common = {"hidden_units": 4, "live_variance": False, "options": options}
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    one = network_class.build(kernel(), torch.Generator().manual_seed(0), latent_dim=1, **common)
    assert one(x)[0].shape == (5,) and one(x)[1].shape[:-1] == (5,)
    if network_class.several_latents:
        several = network_class.build(kernel(), torch.Generator().manual_seed(0), latent_dim=3, **common)
        assert several(x)[0].shape == (3, 5) and several(x)[1].shape[:-1] == (3, 5)
    else:
        with pytest.raises(ValueError, match=f"network {name!r} outputs one latent function"):
            network_class.build(kernel(), torch.Generator(), latent_dim=3, **common)
    with pytest.raises(ValueError, match=f"network_options of network {name!r}"):
        network_class.build(kernel(), torch.Generator(), latent_dim=1, **(common | {"options": {"unknown": 1}}))


META_BUILDS = {  # every registered network: (kernel it starts from, latents, its own options), tiny
    "rfe": (lambda: RBF(2), 1, {}),
    "ntk": (lambda: CNNGP(16, image_shape=(1, 4, 4)), 3, {"filters": [2, 2], "strides": [1, 2], "dense_units": 8}),
}


def test_every_network_has_a_meta_build():
    assert set(META_BUILDS) == set(REGISTERED)


@pytest.mark.parametrize("name", sorted(META_BUILDS))
def test_every_network_builds_its_parameters_on_the_kernels_device(name):
    """On ``meta`` (no values, no mixing with the CPU): a parameter made on the CPU, or a draw made by a
    generator of another device, would show here as it crashes a CUDA run."""
    make_kernel, latents, options = META_BUILDS[name]
    kernel = make_kernel().to("meta")
    network = REGISTERED[name].build(
        kernel,
        draws.new_generators([0], torch.device("meta")),
        latent_dim=latents,
        hidden_units=4,
        live_variance=False,
        options=options,
    )
    assert {tensor.device.type for tensor in [*network.parameters(), *network.buffers()]} == {"meta"}
    mean, factor = network(torch.empty(1, 5, kernel.input_dim, dtype=DTYPE, device="meta"))
    assert mean.device.type == factor.device.type == "meta"
