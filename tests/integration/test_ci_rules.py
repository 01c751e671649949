"""Rules for running the tests in CI: a Chromium that cannot start fails the
browser tests there (CI set, or JIZHI_REQUIRE_BROWSER=1, which .ci/run sets)
and is only a skip with its reason elsewhere."""
import os
import stat

import pytest

from conftest import ROOT
from test_web_browser import chromium


def broken_chromium(tmp_path):
    path = tmp_path / "chromium"
    path.write_text("#!/bin/sh\necho 'cannot open display' >&2\nexit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize("env,outcome", [
    ({}, pytest.skip.Exception),
    ({"JIZHI_REQUIRE_BROWSER": "1"}, pytest.fail.Exception),
    ({"CI": "true"}, pytest.fail.Exception),
    ({"CI": "1", "JIZHI_REQUIRE_BROWSER": "0"}, pytest.fail.Exception),
    ({"CI": "false"}, pytest.skip.Exception),
])
def test_a_browser_that_cannot_start_fails_only_in_ci(tmp_path, monkeypatch, env, outcome):
    for k in ("CI", "JIZHI_REQUIRE_BROWSER"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("JIZHI_CHROMIUM", broken_chromium(tmp_path))
    if not os.path.exists("/usr/bin/chromedriver") and not __import__("shutil").which(
            "chromedriver"):
        # without a driver the reason is "not installed": the same rule applies
        monkeypatch.setenv("JIZHI_CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(outcome) as e:
        chromium()
    msg = str(e.value)
    assert "Chromium cannot start here" in msg or "not installed" in msg, msg
    if outcome is pytest.fail.Exception:
        assert "must run in CI" in msg


def test_ci_entry_point_requires_the_browser():
    text = open(os.path.join(ROOT, ".ci", "run")).read()
    assert "export JIZHI_REQUIRE_BROWSER=1" in text
    assert text.index("export JIZHI_REQUIRE_BROWSER=1") < text.rindex("\nmake test")
