"""Seconds per SVGP training step, ours against GPyTorch's on the same problem (issue: peer benchmark).

Both models are SVGP with learned inducing points, a Cholesky-factored whitened q(u), a zero mean, an
RBF-ARD kernel with a variance, a Gaussian likelihood and Adam (lr 0.003), and both start from the same
state: our k-means inducing points, lengthscales, kernel variance and noise, m = 0 and S = I. They share
the data (N points, D = 8, y = sin(sum x) + noise, seeded), the dtype and every minibatch of B points.
After a few warm-up steps each, rounds of K timed steps alternate between the two (the order flips
every round), so that load from other processes falls on both alike.

Prints a header (device, threads, torch and gpytorch versions, N, D, B, dtype), then one row per M:
median seconds per step of ours and of GPyTorch's, the relative speed gpytorch / ours (> 1: ours is
faster; "ours is 0.7x GPyTorch's or better" means relative speed >= 0.7), and each model's last
training loss per data point (-ELBO / N on the last shared batch), to show both train alike.

GPyTorch runs with its default settings. At the default float64 these match ours: K_ZZ carries
jitter 1e-6 (its variational_cholesky_jitter; ours is gpstudy's JITTER) and M <= 800 (its
max_cholesky_size) means exact Cholesky factors, no CG or Lanczos (fast_computations is moot). With
--dtype float32 they differ, in ways the timing keeps on purpose, as GPyTorch's users get them: the
jitter is 1e-4 instead of our 1e-6, and GPyTorch factors K_ZZ in float64 (its linalg_dtypes).
GPyTorch also adds that jitter to k(x, x) of the batch (a ~1e-5 shift of the loss per point). Its
variational mean starts at zero (mean_init_std=0) as ours does, instead of GPyTorch's random 1e-3.
GPyTorch takes its hand-written backward of the predictive moments only when M < B: at M = B = 500
(the study's setting) it runs its generic LinearOperator path (on CPU ~1.25x slower than B = 501).
S is parametrized differently (ours: softplus diagonal; GPyTorch: raw lower triangle), so the two
losses start equal but drift apart a little during training.

    python benchmarks/peers.py [--M 100 500] [--threads 2] [--device cpu] [--dtype float64]

Needs the optional bench extra: pip install -e '.[bench]'.
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import Tensor

try:
    import gpytorch
except ImportError:
    sys.exit("benchmarks/peers.py needs GPyTorch: pip install -e '.[bench]'")

from gpstudy.kernels import RBF
from gpstudy.likelihoods import GaussianLikelihood
from gpstudy.methods import Method, Problem, build_method
from gpstudy.runtime.devices import synchronize
from gpstudy.runtime.flags import keep_freed_memory
from gpstudy.study import DEFAULT_CONFIG, load_config, run_settings
from gpstudy.training.run import method_config

D, LR, NOISE_STD, WARMUP = 8, 0.003, 0.1, 5
STUDY = load_config(DEFAULT_CONFIG)  # SVGP's default options

Batch = tuple[Tensor, Tensor]
Step = Callable[[Tensor, Tensor], Tensor]  # one Adam step on (x_batch, y_batch); returns -ELBO / N, detached


class PeerSVGP(gpytorch.models.ApproximateGP):
    """GPyTorch's SVGP: whitened VariationalStrategy over a CholeskyVariationalDistribution, zero mean, RBF-ARD."""

    def __init__(self, inducing_points: Tensor):
        distribution = gpytorch.variational.CholeskyVariationalDistribution(inducing_points.shape[0], mean_init_std=0.0)
        strategy = gpytorch.variational.VariationalStrategy(
            self, inducing_points, distribution, learn_inducing_locations=True
        )
        super().__init__(strategy)
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D))

    def forward(self, x: Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def make_problem(n: int, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """x ~ N(0, I) ``[n, D]`` and y = sin(sum x) + N(0, NOISE_STD^2) ``[n]``, seeded."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, D, dtype=dtype, generator=generator)
    y = torch.sin(x.sum(-1)) + NOISE_STD * torch.randn(n, dtype=dtype, generator=generator)
    return x.to(device), y.to(device)


def make_batches(n: int, batch_size: int, count: int, x: Tensor, y: Tensor) -> list[Batch]:
    """``count`` minibatches of ``batch_size`` distinct points, drawn from one seeded generator up front."""
    generator = torch.Generator().manual_seed(1)
    indices = [torch.randperm(n, generator=generator)[:batch_size].to(x.device) for _ in range(count)]
    return [(x[index], y[index]) for index in indices]


def build_ours(x: Tensor, y: Tensor, M: int) -> Method:
    """gpstudy's SVGP with its default kernel and noise; inducing points at k-means centres."""
    kernel, likelihood = RBF(D, dtype=x.dtype).to(x.device), GaussianLikelihood(dtype=x.dtype).to(x.device)
    config = method_config(run_settings(STUDY, None, method="svgp", M=M), x.shape[0])
    problem = Problem(x, y, kernel, likelihood, torch.Generator().manual_seed(0))
    return build_method("svgp", problem, config).to(x.device)


def build_peer(ours: Method) -> tuple[PeerSVGP, gpytorch.likelihoods.GaussianLikelihood]:
    """GPyTorch's SVGP and likelihood in the initial state of ``ours`` (inducing points and hyperparameters)."""
    inducing_points = ours.inducing_inputs.detach().clone()
    model, likelihood = PeerSVGP(inducing_points), gpytorch.likelihoods.GaussianLikelihood()
    model.to(inducing_points)  # dtype and device of the inducing points
    likelihood.to(inducing_points)
    with torch.no_grad():
        model.covar_module.base_kernel.lengthscale = ours.kernel.lengthscale
        model.covar_module.outputscale = ours.kernel.variance
        likelihood.noise = ours.likelihood.noise_variance
    return model, likelihood


def ours_step(method: Method, n: int) -> Step:
    """One Adam step of our SVGP per call."""
    optimizer = torch.optim.Adam(method.parameters(), lr=LR)
    generator = torch.Generator(device=method.inducing_inputs.device).manual_seed(2)
    count = 0

    def step(x_batch: Tensor, y_batch: Tensor) -> Tensor:
        nonlocal count
        count += 1
        loss = method.loss(x_batch, y_batch, count, generator).sum()  # sum: a leading split dimension, if any
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach() / n

    return step


def peer_step(model: PeerSVGP, likelihood: gpytorch.likelihoods.GaussianLikelihood, n: int) -> Step:
    """One Adam step of GPyTorch's SVGP per call, on its VariationalELBO (already divided by N)."""
    model.train()
    likelihood.train()
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=n)
    optimizer = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=LR)

    def step(x_batch: Tensor, y_batch: Tensor) -> Tensor:
        loss = -elbo(model(x_batch), y_batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def seconds_per_step(step: Step, batches: list[Batch], device: torch.device) -> tuple[float, Tensor]:
    """Mean wall seconds of one step over ``batches``, and the last step's loss."""
    synchronize(device)
    tic = time.perf_counter()
    for x_batch, y_batch in batches:
        loss = step(x_batch, y_batch)
    synchronize(device)
    return (time.perf_counter() - tic) / len(batches), loss


def compare(
    x: Tensor, y: Tensor, M: int, batch_size: int, rounds: int, steps: int
) -> tuple[float, float, float, float]:
    """Median seconds per step of ours and GPyTorch's, and their last losses per data point.

    Both take the same batches in the same order: WARMUP untimed steps, then ``rounds`` timed blocks of
    ``steps``, alternating which model goes first.
    """
    n, device = x.shape[0], x.device
    ours = build_ours(x, y, M)
    model, likelihood = build_peer(ours)
    batches = make_batches(n, batch_size, WARMUP + rounds * steps, x, y)
    contenders = {"ours": ours_step(ours, n), "gpytorch": peer_step(model, likelihood, n)}
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    losses: dict[str, Tensor] = {}
    for step in contenders.values():
        seconds_per_step(step, batches[:WARMUP], device)
    for r in range(rounds):
        block = batches[WARMUP + r * steps : WARMUP + (r + 1) * steps]
        for name in list(contenders)[:: 1 if r % 2 == 0 else -1]:
            block_seconds, losses[name] = seconds_per_step(contenders[name], block, device)
            seconds[name].append(block_seconds)
    return (
        statistics.median(seconds["ours"]),
        statistics.median(seconds["gpytorch"]),
        losses["ours"].item(),
        losses["gpytorch"].item(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--M", type=int, nargs="+", default=[100, 500], help="inducing points")
    parser.add_argument("--N", type=int, default=8192, help="training points")
    parser.add_argument("--batch", type=int, default=500, help="minibatch size B")
    parser.add_argument("--rounds", type=int, default=5, help="timed blocks per model")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed block (K)")
    args = parser.parse_args()
    keep_freed_memory()  # as training jobs do; it serves both models alike
    torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"device: {name}, {torch.get_num_threads()} threads; torch {torch.__version__}, "
        f"gpytorch {gpytorch.__version__}; N {args.N}, D {D}, B {args.batch}, {args.dtype}; "
        f"median of {args.rounds} alternating blocks of {args.steps} steps"
    )
    print(
        f"{'M':>5s} {'ours s/step':>12s} {'gpytorch s/step':>16s} {'relative speed':>15s} "
        f"{'ours loss/N':>12s} {'gpytorch loss/N':>16s}"
    )
    x, y = make_problem(args.N, dtype, device)
    for M in args.M:
        ours, peer, ours_loss, peer_loss = compare(x, y, M, args.batch, args.rounds, args.steps)
        print(f"{M:5d} {ours:12.4f} {peer:16.4f} {peer / ours:15.2f} {ours_loss:12.4f} {peer_loss:16.4f}", flush=True)


if __name__ == "__main__":
    main()
