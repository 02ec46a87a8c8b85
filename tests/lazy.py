"""Names a test module binds at its top but imports on first use, so that collecting the tests imports no
TensorFlow (``pytest --co``, and the start of every run, took about 20 s for it)::

    from lazy import lazy
    tf = lazy("tensorflow")
    dtensor = lazy("tensorflow.experimental.dtensor")
    make_mesh = lazy("course_utils.make_mesh")

Each stands for the module, function or class at its dotted path: calls, attribute look-ups and assignments
(``monkeypatch.setattr``) go through to it. Names that start with ``_`` do not: pytest's collection probes objects
for ``__test__`` and ``_mock_name``, which must not import anything. Where a test needs a private name, or the object
itself (``isinstance``, ``pytest.raises``, a string), it imports it inside the test.
"""
import importlib

UNSHARDED = "unsharded"  # dtensor.UNSHARDED, for module-level sharding specs (tests/test_test_session.py checks it)


class lazy:
    """The object at a dotted ``path``, imported when first used (see the module's docstring)."""

    def __init__(self, path):
        object.__setattr__(self, "_lazy_path", path)
        object.__setattr__(self, "_lazy_target", None)

    def _resolve(self):
        if self._lazy_target is None:
            parts = self._lazy_path.split(".")
            target = importlib.import_module(parts[0])
            for depth, part in enumerate(parts[1:], start=2):
                target = getattr(target, part, None) or importlib.import_module(".".join(parts[:depth]))
            object.__setattr__(self, "_lazy_target", target)
        return self._lazy_target

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(f"{name}: {self!r} forwards no private names (import the object in the test)")
        return getattr(self._resolve(), name)

    def __setattr__(self, name, value):  # monkeypatch.setattr(a_lazy_module, name, ...) patches the module itself
        setattr(self._resolve(), name, value)

    def __delattr__(self, name):
        delattr(self._resolve(), name)

    def __call__(self, *args, **kwargs):
        return self._resolve()(*args, **kwargs)

    def __repr__(self):
        return f"<lazy {self._lazy_path}>"
