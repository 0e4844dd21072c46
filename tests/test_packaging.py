"""A plain (non-editable) build ships the kernels and configs inside the package, and the
installed package works without the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SHIPPED = ["gemmtune/kernel_sources/xgemm_k5.cl", "gemmtune/kernel_sources/common.cl",
           "gemmtune/kernel_sources/pad.cl", "gemmtune/configs/space.toml", "gemmtune/configs/defaults.toml",
           "gemmtune/configs/prior-nvidia-h200.csv.gz",
           # xgemm_rt.cl and the parts it includes
           *(f"gemmtune/kernel_sources/xgemm_rt{part}.cl"
             for part in ("", "_checks", "_copy", "_compute", "_mma", "_pipe", "_streamk"))]

# Runs in a fresh interpreter whose only gemmtune is the one installed from the wheel.
CHECK_INSTALLED = textwrap.dedent("""
    import sys
    from pathlib import Path
    import numpy as np
    import gemmtune
    from gemmtune.files import shipped as resources
    from gemmtune.space import load_space

    site = Path(sys.argv[1]).resolve()
    for module in (gemmtune, resources):
        assert Path(module.__file__).resolve().is_relative_to(site), module.__file__
    assert Path(str(resources.kernels_dir())).resolve().is_relative_to(site)
    assert Path(str(resources.configs_dir())).resolve().is_relative_to(site)
    source = resources.load_kernel_source("xgemm_k5.cl")
    assert "__kernel" in source and "pad_transpose" in source and '#include "' not in source
    source = resources.load_kernel_source("xgemm_rt.cl")
    assert "xgemm_fixup" in source and "pipe_async" in source and '#include "' not in source
    space = load_space()
    assert space.family("xgemm_k5").size > 1
    from gemmtune.models import shipped_prior
    prior = Path(str(resources.configs_dir())) / "prior-nvidia-h200.csv.gz"
    assert len(shipped_prior.read(prior)) > 10_000
    rng = np.random.default_rng(1)
    a = rng.uniform(0.25, 1.0, (7, 5)).astype(np.float32)
    b = rng.uniform(0.25, 1.0, (5, 13)).astype(np.float32)
    config = {"TSM": 8, "TSN": 4, "TSK": 8, "WPTN": 1, "PAD": 0, "TRANSPOSEX": 8, "TRANSPOSEY": 16}
    c = gemmtune.gemm(a, b, config=config)
    # Positive operands: every element is a sum of 5 positive products, so a relative tolerance
    # of a few float32 roundoffs per term is safe.
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5)
    print("installed ok")
""")

# gemm with no configuration, where nothing was ever tuned: the shipped default.
DEFAULT_GEMM = textwrap.dedent("""
    import numpy as np
    import gemmtune
    a = np.full((3, 4), 0.5, np.float32)
    np.testing.assert_array_equal(gemmtune.gemm(a, a.T.copy()), np.full((3, 3), 1.0, np.float32))
    print("default ok")
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Build from a copy of the checkout: an in-tree build would write build/ and *.egg-info into
    # the working tree, and a clean copy shows that nothing outside the tracked layout is needed.
    tmp = tmp_path_factory.mktemp("build")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "results"))
    out = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(out), str(src)], check=True, capture_output=True, text=True)
    (built,) = out.glob("gemmtune-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("install") / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(site), str(wheel)], check=True, capture_output=True, text=True)
    return site


def run_installed(site: Path, *args: str) -> subprocess.CompletedProcess:
    # The installed copy first on the path; the venv's own site-packages (numpy, pyopencl, the
    # PoCL driver) stay importable because the same interpreter runs it. cwd is outside the
    # checkout, so the checkout's gemmtune/ cannot be picked up from the current directory.
    env = {**os.environ, "PYTHONPATH": str(site)}
    for name in ("GEMMTUNE_DEVICE", "GEMMTUNE_DB"):
        env.pop(name, None)
    return subprocess.run([sys.executable, *args], cwd=site.parent, env=env, capture_output=True,
                          text=True, timeout=300)


def test_wheel_ships_kernels_and_configs(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in SHIPPED if name not in names]
    assert not missing, f"not in {wheel.name}: {missing}"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "gemmtune = gemmtune.cli:main" in text
    # The shipped files are the checkout's, byte for byte.
    with zipfile.ZipFile(wheel) as z:
        assert z.read("gemmtune/kernel_sources/xgemm_k5.cl") == (REPO / "kernels" / "xgemm_k5.cl").read_bytes()
        assert z.read("gemmtune/configs/space.toml") == (REPO / "configs" / "space.toml").read_bytes()


def test_installed_package_works_without_the_checkout(installed):
    result = run_installed(installed, "-c", CHECK_INSTALLED, str(installed))
    assert result.returncode == 0, result.stderr
    assert "installed ok" in result.stdout


def test_default_gemm_runs_anywhere(installed):
    # A user's first call after `pip install`: no config, no results database, in a directory
    # that is not the checkout (so there is no results/ folder).
    assert not (installed.parent / "results").exists()
    result = run_installed(installed, "-c", DEFAULT_GEMM)
    assert result.returncode == 0, result.stderr
    assert "default ok" in result.stdout


def test_python_dash_m_gemmtune(installed):
    result = run_installed(installed, "-m", "gemmtune", "--help")
    assert result.returncode == 0, result.stderr
    for command in ("devices", "space", "verify"):
        assert command in result.stdout
    # The installed copy answers, not the checkout.
    where = run_installed(installed, "-c", "import gemmtune.cli; print(gemmtune.cli.__file__)")
    assert Path(where.stdout.strip()).resolve().is_relative_to(installed.resolve())


def test_console_scripts():
    # The venv's gemmtune (the editable install the suite runs under) is a working console script.
    script = Path(sys.executable).parent / "gemmtune"
    assert script.is_file() and os.access(script, os.X_OK)
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "verify" in result.stdout


def test_installed_console_script(installed):
    # pip install --target puts the wheel's console script in <target>/bin.
    script = installed / "bin" / "gemmtune"
    assert script.is_file()
    result = run_installed(installed, str(script), "space", "--count", "--size", "16")
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 0
