"""From finished runs to what a reader sees: display names (``labels``), the tidy tables of runs and learning
curves (``results``), Tables 1-4 (``tables``), the figures (``plots``), the report's HTML pages (``pages``), a
regeneration against a reference (``compare``) and the paper's claims checked (``claims``).
"""
