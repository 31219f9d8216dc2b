"""The machine a job runs on: its devices (discovery, one GPU slot per job), the process's flags (TF32, the
factorizations' library, memory), host synchronisations counted, what every Snakemake job's process sets up,
and the environment a run records (code, libraries, device).

It imports only gpstudy's base modules (``io``, ``paths``, ``numerics``, ...): the maths and the study build on
it, never the other way round.
"""
