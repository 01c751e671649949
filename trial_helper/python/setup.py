"""Builds the Python trial helper with its own copy of libjizhi.

`pip install ./trial_helper/python` compiles libjizhi's C sources (the
helper, trial_helper/*.c, and the common code it links, the Makefile's
HELPER_COMMON_SRC) into jizhi/libjizhi.so inside the package, which
jizhi.load_library() finds before anything else but JIZHI_LIB. It needs a C
compiler and the libzmq and jansson headers (Debian: libzmq3-dev,
libjansson-dev; scripts/install-deps.sh installs them).

The sources are taken from the repository this folder sits in (pip >= 21.3
builds a local folder in place), or, in an sdist, from the csrc/ folder the
sdist carries (the same files, copied in when the sdist is made).

Nothing is left in the source tree: setuptools' build/ and egg-info folders
go to a temporary folder removed when the build ends.
"""

import atexit
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import Distribution, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
# What the Makefile's HELPER_COMMON_SRC leaves out of common/ (they need
# libsodium); used when the Makefile is not there to read it from.
DEFAULT_EXCLUDED = ("common/ident.c", "common/client.c", "common/authkeys.c")


def source_root():
    """The folder holding trial_helper/ and common/: csrc/ in an sdist, else
    the repository two levels up."""
    for root in (os.path.join(HERE, "csrc"), os.path.normpath(os.path.join(HERE, "..", ".."))):
        if os.path.isfile(os.path.join(root, "trial_helper", "jizhi.h")) and os.path.isdir(
            os.path.join(root, "common")
        ):
            return root
    sys.exit(
        "jizhi: cannot find libjizhi's C sources (trial_helper/*.c, common/*.c) in %s/csrc "
        "or %s; install from a jizhi source tree (pip install ./trial_helper/python, "
        "pip >= 21.3) or from an sdist" % (HERE, os.path.normpath(os.path.join(HERE, "..", "..")))
    )


def excluded_common(root):
    """The common/ files libjizhi does not carry, read from the Makefile's
    HELPER_COMMON_SRC when the Makefile is there."""
    try:
        with open(os.path.join(root, "Makefile")) as f:
            text = f.read()
    except OSError:
        return DEFAULT_EXCLUDED
    m = re.search(r"^HELPER_COMMON_SRC\s*:=\s*\$\(filter-out\s+([^,]*),", text, re.M)
    return tuple(m.group(1).split()) if m else DEFAULT_EXCLUDED


def helper_sources(root):
    """(helper sources, common sources), relative to root."""
    rel = lambda pattern: sorted(  # noqa: E731
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, pattern))
    )
    skip = set(excluded_common(root))
    return rel("trial_helper/*.c"), [p for p in rel("common/*.c") if p not in skip]


def so_major(root):
    with open(os.path.join(root, "trial_helper", "jizhi.h")) as f:
        m = re.search(r'^#define JZ_VERSION "(\d+)', f.read(), re.M)
    return m.group(1) if m else "0"


def pkg_config_cflags():
    try:
        out = subprocess.run(
            ["pkg-config", "--cflags", "libzmq", "jansson"], capture_output=True, text=True
        )
    except OSError:
        return []
    return out.stdout.split() if out.returncode == 0 else []


class BuildLibjizhi(build_ext):
    """Compiles libjizhi into jizhi/libjizhi.so (a plain shared library for
    ctypes, not a Python extension module)."""

    def get_source_files(self):
        return []  # the sdist carries them in csrc/ (SdistWithSources)

    def _target(self):
        if self.inplace:
            return os.path.join(HERE, "jizhi", "libjizhi.so")
        return os.path.join(self.build_lib, "jizhi", "libjizhi.so")

    def get_outputs(self):
        return [self._target()]

    def run(self):
        # Compiled the way the Makefile compiles libjizhi (CC, CFLAGS and
        # LDFLAGS from the environment as in make), not with Python's own
        # flags (-DNDEBUG would drop the helper's asserts).
        root = source_root()
        helper, common = helper_sources(root)
        cc = shlex.split(os.environ.get("CC", "cc"))
        cflags = shlex.split(os.environ.get("CFLAGS", "-O2 -g"))
        cflags += ["-std=gnu11", "-fPIC", "-pthread"] + pkg_config_cflags()
        cflags += ["-I" + root, "-I" + os.path.join(root, "trial_helper")]
        ldflags = shlex.split(os.environ.get("LDFLAGS", ""))
        tmp = os.path.join(os.path.abspath(self.build_temp), "libjizhi")
        os.makedirs(tmp, exist_ok=True)

        def compile_(srcs):
            objs = []
            for s in srcs:
                obj = os.path.join(tmp, s.replace("/", "__")[:-2] + ".o")
                self.spawn(cc + cflags + ["-c", os.path.join(root, s), "-o", obj])
                objs.append(obj)
            return objs

        helper_objs = compile_(helper)
        # The common code goes in as an archive, as in the Makefile, so only
        # the members the helper uses are linked.
        archive = os.path.join(tmp, "libjzcommon.a")
        if os.path.exists(archive):
            os.remove(archive)
        self.spawn([os.environ.get("AR", "ar"), "rcs", archive] + compile_(common))
        target = self._target()
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self.spawn(
            cc
            + ["-shared", "-o", target]
            + helper_objs
            + [
                archive,
                "-Wl,--version-script=" + os.path.join(root, "trial_helper", "libjizhi.map"),
                "-Wl,-soname,libjizhi.so." + so_major(root),
            ]
            + ldflags
            + ["-pthread", "-lzmq", "-ljansson", "-lm"]
        )


class SdistWithSources(sdist):
    """An sdist that builds on its own: libjizhi's sources go into csrc/."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = source_root()
        helper, common = helper_sources(root)
        extra = helper + common + glob.glob(os.path.join(root, "trial_helper", "*.h"))
        extra += glob.glob(os.path.join(root, "common", "*.h"))
        extra += ["trial_helper/libjizhi.map", "trial_helper/jizhi.h"]
        for p in extra:
            rel = os.path.relpath(os.path.join(root, p), root)
            dst = os.path.join(base_dir, "csrc", rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(root, rel), dst)


class BinaryDistribution(Distribution):
    """The wheel carries a compiled library: platform-specific."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_ext": BuildLibjizhi, "sdist": SdistWithSources}

try:  # tag the wheel py3-none-<platform>: libjizhi does not use Python's ABI
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = PlatformWheel
except ImportError:
    pass

# setuptools' build/ and egg-info go outside the source tree.
_scratch = tempfile.mkdtemp(prefix="jizhi-setup-")
atexit.register(shutil.rmtree, _scratch, True)

setup(
    distclass=BinaryDistribution,
    cmdclass=cmdclass,
    options={
        "build": {"build_base": os.path.join(_scratch, "build")},
        "egg_info": {"egg_base": _scratch},
    },
)
