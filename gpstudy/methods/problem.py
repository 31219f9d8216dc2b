"""What every inference method is built on: the training data, the prior and the observation model."""

from dataclasses import dataclass

from torch import Tensor

from gpstudy import generators as draws
from gpstudy.kernels import Kernel
from gpstudy.likelihoods import Likelihood


@dataclass(eq=False)
class Problem:
    """The training data, kernel, likelihood and initialization randomness a method is built on
    (``gpstudy.methods.build_method``); the device and dtype are the tensors'.

    Splits in a batch: with S generators (one per split) the data have a leading split dimension and
    the kernel and likelihood are built with ``batch_shape=(S,)``; with one generator nothing is batched.

    Args:
        x_train: training inputs ``[*batch, N, D]``.
        y_train: training targets or labels ``[*batch, N]``.
        kernel: the prior kernel, already initialized (pretrained or defaults).
        likelihood: p(y | f), already initialized; a method that needs a particular one checks it.
        generators: randomness of the initialization only (k-means seeds, RFE frequencies and mean):
            one ``torch.Generator``, or one per split (``gpstudy.generators``).
    """

    x_train: Tensor
    y_train: Tensor
    kernel: Kernel
    likelihood: Likelihood
    generators: draws.Generators
