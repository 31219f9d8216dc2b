"""gpstudy: a reproducible study pipeline for Gaussian-process inference.

The package in wings, lowest first (a wing imports only those below it: ``tests/test_imports.py``):

- base modules: ``io`` (atomic files), ``paths`` (the study's path grammar), ``numerics`` (dtypes, jitter, chunks),
  ``generators`` (one random generator per split);
- ``runtime``: the machine: devices and GPU slots, process flags, host synchronisations, a job's process, the
  environment a run records;
- ``linalg``: Cholesky factors with jitter, Grams, parameterizations, blocked factors; ``data``: data sets, their
  download, splits;
- ``kernels``, ``likelihoods``, ``gaussian`` (densities, KL, conditioning, GPNet's tempered prior and target);
- ``nets`` (inference networks), ``metrics``; ``methods`` (one file per method: exact GP, SVGP, GPNet, FBNN, ODVGP,
  AutoGP), ``paper`` (the papers' numbers);
- ``study``: the config, its validation, each run's settings and the plan of jobs;
- ``training``: the fit loop, pretraining, checkpoints, stopping, progress; ``report``: labels, tables, figures,
  pages, comparisons, the paper's claims;
- ``diagnostics`` (checks of the GPU path), ``notebook`` (a method fitted on arrays); ``cli``: the ``gpstudy``
  command.

Importing this module imports nothing else (no torch): ``gpstudy --version`` starts at once.
"""

__version__ = "0.2.0.dev0"
