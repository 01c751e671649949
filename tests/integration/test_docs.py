"""The references in docs/ stay complete: every command `jizhi --help`
lists has its entry in docs/cli.md, every top-level key of a study spec
and every scheduler type is in docs/spec.md, and the README and the code
cite docs/ (never a file outside the repository)."""
import os
import re
import subprocess

import pytest

from conftest import JIZHI, ROOT


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def test_every_command_is_in_cli_md():
    out = subprocess.run([JIZHI, "--help"], capture_output=True, text=True).stdout
    names = re.findall(r"^  ([a-z][a-z-]+) ", out, re.M)
    assert len(names) >= 10, out
    doc = read("docs", "cli.md")
    missing = [n for n in names if f"jizhi {n}" not in doc]
    assert not missing, f"docs/cli.md lacks: {missing}"


def test_every_spec_key_and_scheduler_is_in_spec_md(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"zzz": 1}')
    p = subprocess.run([JIZHI, "study", "submit", str(bad), "--controller", "ipc:///nonexistent"],
                       capture_output=True, text=True)
    m = re.search(r"expected one of: ([a-z_, ]+)\)", p.stderr)
    assert m, p.stderr
    keys = [k.strip() for k in m.group(1).split(",")]
    doc = read("docs", "spec.md")
    assert [k for k in keys if f"`{k}`" not in doc] == []
    for sched in ("random", "grid", "bo", "tpe", "cmaes", "pbt", "batchsize", "asha", "hyperband",
                  "median"):
        assert f"`{sched}`" in doc, sched


def test_no_reference_outside_the_repository():
    p = subprocess.run(["git", "grep", "-n", "-e", "shared/DESIGN", "-e", "DESIGN §", "--",
                        ".", ":!tests/integration/test_docs.py"],
                       cwd=ROOT, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        pytest.skip("not a git checkout: " + p.stderr.strip())
    assert p.returncode == 1 and p.stdout == "", p.stdout


def test_readme_layout_names_every_folder_and_doc():
    """README's Layout table has a row for every top-level folder the
    repository tracks, and its docs row links every docs/*.md and
    trainer/README.md."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    folders = sorted({f.split("/")[0] for f in files if "/" in f and not f.startswith(".")})
    assert "web" in folders and "bench" in folders, folders
    layout = read("README.md").split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)/` \|", layout, re.M)
    assert [f for f in folders if f not in rows] == []
    docs_row = re.search(r"^\| `docs/` \|(.*)$", layout, re.M).group(1)
    docs = sorted(f for f in files if f.startswith("docs/") and f.endswith(".md"))
    assert docs, files
    assert [d for d in docs + ["trainer/README.md"] if f"({d})" not in docs_row] == []


def test_format_check_covers_cuda_files():
    """`make format-check` checks every tracked C, header, CUDA and C++ file
    (tests/cudaemu's): the count it prints is theirs."""
    files = subprocess.run(["git", "ls-files", "*.c", "*.h", "*.cu", "*.cc"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    assert any(f.endswith(".cu") for f in files), files
    assert any(f.endswith(".cc") for f in files), files
    p = subprocess.run(["make", "--no-print-directory", "-s", "format-check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"format-check: {len(files)} files match" in p.stdout, p.stdout
