"""``tf.io.gfile`` and ``tf.io.matching_files`` under TF and tapejax: each side works in its own
fresh directory and returns paths relative to it; results, file contents and error classes are
compared (``glob``'s order is the directory's, so it is compared sorted)."""
import os
import tempfile

import numpy as np

from .harness import parity, raises


def _root():
    return tempfile.mkdtemp(prefix="gfile_parity_")


def _strs(r, root):
    """A string vector's values as paths relative to ``root``."""
    values = r.numpy() if hasattr(r, "numpy") else r
    return [os.path.relpath(os.fsdecode(v), root) for v in np.asarray(values, dtype=object).reshape(-1).tolist()]


def _tree(tf, root):
    g = tf.io.gfile
    for d in ("sub", "sub2", "sub/deep"):
        g.makedirs(os.path.join(root, d))
    for name in ("b.txt", "a.txt", "c.dat", ".hid", "x*y.txt", "sub/z.txt", "sub/a.txt", "sub2/q.txt"):
        with g.GFile(os.path.join(root, name), "w") as f:
            f.write(name + "\n")


@parity
def test_gfile_reading_and_writing(tf):
    """Text and binary modes, read(n) / readline / readlines / iteration, seek / tell, append, size,
    str and bytes writes; lazy opening (a missing file raises at the first read, a write-mode file
    never written is not created); reading a write-only file and writing a read-only one."""
    root = _root()
    g = tf.io.gfile
    p = os.path.join(root, "a.txt")
    with g.GFile(p, "w") as f:
        f.write("line1\nline2\n")
        f.write(b"bytes\n")
        written = f.tell()
    out = [written, g.GFile(p).read(), g.GFile(p, "rb").read(), g.GFile(p).read(3), g.GFile(p).readline(),
           g.GFile(p).readlines(), list(g.GFile(p)), g.GFile(p).size()]
    f = g.GFile(p)
    f.seek(6)
    first = f.read(5)
    f.seek(offset=1, whence=1)
    out.append((first, f.tell(), f.read(), f.seekable(), f.mode, f.name == p))
    f.seek(-3, 2)
    out.append(f.read())
    with g.GFile(p, "a") as f:
        f.write("more")
    out.append(g.GFile(p).read())
    never = os.path.join(root, "never.txt")
    g.GFile(never, "w").close()
    out.append(g.exists(never))
    missing = g.GFile(os.path.join(root, "none"))
    out += [raises(missing.read), raises(g.GFile(os.path.join(root, "nodir", "x"), "w").write, "a"),
            raises(g.GFile, p, "x"), raises(g.GFile, p, "rw"),
            raises(g.GFile(p).write, "x"), raises(g.GFile(os.path.join(root, "w.txt"), "w").read),
            raises(g.GFile(p).seek, 0, 3), raises(g.GFile(p).seek)]
    closed = g.GFile(p)
    closed.close()
    out.append(closed.read())   # (TF's close only drops the buffer: the next read opens again)
    return out


@parity
def test_gfile_directories(tf):
    """exists / isdir / mkdir / makedirs / listdir / stat / remove / rmtree / walk and their
    errors."""
    root = _root()
    g = tf.io.gfile
    _tree(tf, root)
    j = lambda *p: os.path.join(root, *p)   # noqa: E731
    out = [g.exists(j("a.txt")), g.exists(j("zz")), g.isdir(root), g.isdir(j("a.txt")), g.isdir(j("zz")),
           g.mkdir(j("d1")), g.mkdir(j("d1")), raises(g.mkdir, j("q", "r")), g.makedirs(j("d2", "e", "f")),
           g.makedirs(j("d2", "e", "f")), raises(g.makedirs, j("a.txt", "x")), raises(g.makedirs, j("a.txt")),
           sorted(g.listdir(root)), g.listdir(j("d2")), raises(g.listdir, j("zz")), raises(g.listdir, j("a.txt"))]
    st = g.stat(j("a.txt"))
    out += [st.length, st.is_directory, isinstance(st.mtime_nsec, int), g.stat(j("d2")).is_directory,
            raises(g.stat, j("zz"))]
    out += [g.remove(j("c.dat")), raises(g.remove, j("c.dat")), raises(g.remove, j("d1")), raises(g.remove, j("sub"))]
    out.append([(os.path.relpath(a, root), sorted(b), sorted(c)) for a, b, c in g.walk(root)])
    out.append([os.path.relpath(a, root) for a, _, _ in g.walk(j("d2"), topdown=False)])
    out += [list(g.walk(j("zz"))), list(g.walk(j("a.txt")))]
    out += [g.rmtree(j("d2")), raises(g.rmtree, j("d2")), g.rmtree(j("b.txt")), g.exists(j("b.txt"))]
    out += [g.join("a", "b", "c"), g.join("/a/", "/b"), g.exists(__import__("pathlib").Path(root))]
    return out


@parity
def test_gfile_copy_and_rename(tf):
    """copy / rename with and without ``overwrite``, onto a directory, from a missing file."""
    root = _root()
    g = tf.io.gfile
    _tree(tf, root)
    j = lambda *p: os.path.join(root, *p)   # noqa: E731
    out = [g.copy(j("a.txt"), j("c.txt")), g.GFile(j("c.txt")).read(), raises(g.copy, j("a.txt"), j("c.txt")),
           g.copy(j("b.txt"), j("c.txt"), overwrite=True), g.GFile(j("c.txt")).read(),
           raises(g.copy, j("zz"), j("c2.txt")), raises(g.copy, j("a.txt"), j("sub"))]
    out += [g.rename(j("c.txt"), j("r.txt")), g.exists(j("c.txt")), raises(g.rename, j("a.txt"), j("r.txt")),
            g.rename(j("r.txt"), j("b.txt"), overwrite=True), g.GFile(j("b.txt")).read(),
            raises(g.rename, j("zz"), j("yy")), g.rename(j("sub2"), j("sub3")), sorted(g.listdir(j("sub3")))]
    return out


@parity
def test_glob_and_matching_files(tf):
    """TF's glob syntax (``*``, ``?``, classes, ``[^...]`` and ``[!...]``, ``\\`` escapes, hidden
    names, several components, a trailing slash), lists of patterns, ``matching_files`` sorting
    every match (duplicates kept), its errors."""
    root = _root()
    g = tf.io.gfile
    _tree(tf, root)
    pats = ["*", "*.txt", "[ab].txt", "[^a].txt", "[!a].txt", "x\\*y.txt", "x[*]y.txt", ".*", "*/*.txt",
            "s*/a.txt", "sub", "nope/*", "[a-b].txt", "??b", "sub/"]
    out = []
    for p in pats:
        full = os.path.join(root, p)
        out.append((p, sorted(_strs(g.glob(full), root)), _strs(tf.io.matching_files(full), root)))
    many = [os.path.join(root, p) for p in ("b*", "a*", "*.txt")]
    out.append(sorted(_strs(g.glob(many), root)))
    out.append(_strs(tf.io.matching_files(many), root))
    out.append(_strs(tf.io.matching_files(np.array(many, dtype=object)), root))
    out += [raises(tf.io.matching_files, [[os.path.join(root, "*")]]), raises(tf.io.matching_files, 3),
            raises(g.glob, 3)]
    return out


@parity
def test_a_checkpoint_directory_kept_with_gfile(tf):
    """The usual training-script chores: make the run directory, write a config, find the latest
    step files by glob, keep the newest two, read the config back."""
    root = _root()
    g = tf.io.gfile
    run = g.join(root, "runs", "exp1")
    if not g.exists(run):
        g.makedirs(run)
    with g.GFile(g.join(run, "config.json"), "w") as f:
        f.write('{"lr": 0.1}')
    for step in (100, 200, 300):
        with g.GFile(g.join(run, f"ckpt-{step}.data"), "wb") as f:
            f.write(np.arange(step // 100, dtype=np.float32).tobytes())
    found = sorted(g.glob(g.join(run, "ckpt-*.data")), key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    for old in found[:-2]:
        g.remove(old)
    sizes = [g.stat(p).length for p in g.glob(g.join(run, "ckpt-*.data"))]
    latest = np.frombuffer(g.GFile(found[-1], "rb").read(), np.float32)
    return sorted(g.listdir(run)), sorted(sizes), latest, g.GFile(g.join(run, "config.json")).read()
