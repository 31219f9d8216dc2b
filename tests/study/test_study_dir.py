"""``dir(gpstudy.study)`` lists its lazy names (tab completion and ``help`` see them) without importing them."""

import subprocess
import sys

import gpstudy.study as study


def test_dir_lists_the_lazy_names_without_importing_them():
    check = (
        "import sys, gpstudy.study as study\n"
        "names = dir(study)\n"
        "missing = sorted(set(study.__all__) - set(names))\n"
        "sys.exit(f'missing {missing}' if missing else 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr or "dir(gpstudy.study) imported torch"
    assert "run_settings" in study.__all__ and dir(study) == sorted(dir(study))
