"""The package as a user installs it: a wheel built with `pip wheel .` and installed in a clean virtualenv
carries the console's static files and the protocol, builds without setuptools' package warnings, and runs
`streamplane dev`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import Proc

ROOT = Path(__file__).resolve().parents[2]


def test_a_built_wheel_installs_in_a_clean_venv_and_runs_the_dev_stack(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    leftover = not (ROOT / "build").exists()  # setuptools builds in the source tree: leave it as it was
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-w", str(wheels)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    if leftover:
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "absent from the `packages` configuration" not in built.stdout + built.stderr
    (wheel,) = wheels.glob("streamplane-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True, timeout=900
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    files = subprocess.run(
        [str(python), "-c", "import importlib.resources as r; "
         "s = r.files('streamplane.coordinator.console') / 'static'; "
         "print(sorted(p.name for p in s.iterdir())); "
         "print((r.files('streamplane.v1') / 'topology.proto').is_file())"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert files.returncode == 0, files.stderr
    assert files.stdout.splitlines() == ["['app.js', 'console.css', 'index.html']", "True"]

    dev = Proc(
        [str(venv / "bin" / "streamplane"), "dev", "--data-dir", str(tmp_path / "dev"), "--port", "0"],
        env={"STREAMPLANE_CREDENTIALS_DIR": str(tmp_path / "credentials")},
    )
    try:
        dev.wait_for(r"^ready", timeout=120)
    finally:
        assert dev.stop() in (0, -15, 143), "".join(dev.stderr)[-2000:]
