"""AutoGP's phases through the training loop: an ELBO phase, a leave-one-out phase, then the ELBO again
(issue 27). Prints KL[q(u) || p(u)] at the end of each phase and, for the first ``--reentry`` steps of
the second ELBO phase, how far Z and the kernel (and q's mean) move with the one Adam that ran both
phases, relative to a fresh Adam started from the same state and batches (1: the shared state changes
nothing; the issue's defect made LOO steps 15-27x too small).

The problem is the LOO test's (tests/methods/test_autogp.py): N = 240 points in D = 2, a Bernoulli
likelihood, batches of 4 (N/n = 60), M = 5; every other setting is config.yaml's ``autogp_loo``.

    python benchmarks/autogp_phases.py [--elbo 200] [--loo 20 200] [--reentry 20] [--seed 3]
"""

import argparse
import copy

import numpy as np
import torch

from gpstudy.methods import Problem, build_method
from gpstudy.numerics import DTYPES
from gpstudy.study import DEFAULT_CONFIG, load_config, run_settings
from gpstudy.training.fit import BatchSampler, fit, train_iteration
from gpstudy.training.optim import adam
from gpstudy.training.run import initial_kernel, initial_likelihood, method_config

STUDY = load_config(DEFAULT_CONFIG)  # autogp_loo's options
N, D, BATCH, M = 240, 2, 4, 5


def build(elbo_steps: int, loo_steps: int, seed: int):
    """AutoGP with leave-one-out phases on the synthetic Bernoulli problem, and its data."""
    settings = run_settings(
        STUDY,
        None,
        method="autogp_loo",
        M=M,
        likelihood="bernoulli",
        likelihood_options={},
        lr=0.01,
        initial_lengthscale=1.0,
    )
    settings.options.update(variational_phase=elbo_steps, loo_phase=loo_steps, samples=10)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=generator, dtype=DTYPES[settings.dtype][0])
    y = (torch.sin(2 * x[:, 0]) + 0.3 * torch.randn(N, generator=generator, dtype=x.dtype) > 0).to(x.dtype)
    problem = Problem(
        x, y, initial_kernel(settings, D), initial_likelihood(settings), torch.Generator().manual_seed(seed)
    )
    method = build_method(settings.method, problem, method_config(settings, N, np.zeros(D), np.ones(D)))
    return method, x, y, settings.lr


def hyperparameters(method) -> torch.Tensor:
    """Z and the kernel's parameters, flattened."""
    return torch.cat(
        [method.inducing_inputs.detach().flatten()] + [p.detach().flatten() for p in method.kernel.parameters()]
    )


def run(elbo_steps: int, loo_steps: int, reentry: int, seed: int) -> dict[str, float]:
    method, x, y, lr = build(elbo_steps, loo_steps, seed)
    switch = elbo_steps + loo_steps
    kl, trace, at_reentry = {}, [], {}
    batches = torch.Generator().manual_seed(seed + 1)

    def record() -> dict:  # after every iteration; draws nothing
        trace.append((hyperparameters(method), method.q_mean.detach().clone()))
        if len(trace) in (elbo_steps, switch):
            kl[len(trace)] = float(method.kl_divergence().detach())
        if len(trace) == switch:
            at_reentry.update(state=copy.deepcopy(method.state_dict()), batches=batches.get_state())
        return {}

    fit(
        method,
        x,
        y,
        iterations=switch + reentry,
        batch_size=BATCH,
        lr=lr,
        generators=batches,
        evaluate=record,
        eval_every=1,
    )
    shared = [(trace[-1][i] - trace[switch - 1][i]).norm() for i in (0, 1)]

    fresh, *_ = build(elbo_steps, loo_steps, seed)
    fresh.load_state_dict(at_reentry["state"])
    batches.set_state(at_reentry["batches"])
    sampler, optimizer = BatchSampler(N, BATCH, batches, x.device), adam(fresh.adam_parameters(), lr, x.device)
    start = (hyperparameters(fresh), fresh.q_mean.detach().clone())
    for step in range(switch + 1, switch + reentry + 1):
        train_iteration(fresh, optimizer, sampler, x, y, step, batches)
    alone = [(hyperparameters(fresh) - start[0]).norm(), (fresh.q_mean.detach() - start[1]).norm()]
    return {
        "kl_after_elbo": kl[elbo_steps],
        "kl_after_loo": kl[switch],
        "kl_after_reentry": float(method.kl_divergence().detach()),
        "z_kernel_ratio": float(shared[0] / alone[0]),
        "q_mean_ratio": float(shared[1] / alone[1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elbo", type=int, default=200, help="iterations of the first ELBO phase")
    parser.add_argument("--loo", type=int, nargs="+", default=[20, 200], help="iterations of the LOO phase")
    parser.add_argument("--reentry", type=int, default=20, help="iterations of the second ELBO phase compared")
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"{'LOO steps':>9} {'KL after ELBO':>13} {'after LOO':>9} {'after re-entry':>14} "
        f"{'Z+kernel shared/fresh':>21} {'q mean shared/fresh':>19}"
    )
    for loo_steps in args.loo:
        row = run(args.elbo, loo_steps, args.reentry, args.seed)
        print(
            f"{loo_steps:>9} {row['kl_after_elbo']:>13.2f} {row['kl_after_loo']:>9.2f} "
            f"{row['kl_after_reentry']:>14.2f} "
            f"{row['z_kernel_ratio']:>21.2f} {row['q_mean_ratio']:>19.2f}"
        )


if __name__ == "__main__":
    main()
