"""Answers as plain data: what leaves a graded notebook's sandbox, and how the grader reads it back.

The grader never runs a checker inside the student's kernel. There, each exercise's
``collect`` turns the answers into plain data with :func:`dumps`; the grader reads the text with
:func:`loads` in its own process and judges it. Only these kinds cross, each recognised by its
**exact** type (a subclass, or an object whose ``__class__`` lies, becomes an :class:`Opaque`):

- ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``...``; ``list``, ``tuple``,
  ``dict``, ``set``; ``fractions.Fraction``;
- NumPy arrays (not of dtype ``object``) and NumPy scalars;
- TensorFlow tensors (as arrays), DTensors (layout string and one block per device), variables
  and ``DVariable`` s, ``Layout``, ``Mesh``, ``TensorShape`` and ``DType``;
- classes of the libraries the course uses (``ValueError``, ``tf.distribute.MirroredStrategy``):
  read back as the class itself; built-in exceptions (``RuntimeError("...")``), members of the
  standard library's enumerations (``signal.SIGTERM``) and ``course_utils``' dataclasses (the
  ``CollectiveRun`` s that ``collectives_run_by`` returns);
- any other class or object: an :class:`Opaque` naming its type.

TensorFlow is imported only when the data holds TensorFlow values. Reading back a ``Mesh``,
``Layout`` or DTensor in a process whose TensorFlow has not started yet first splits its CPU into as
many logical CPUs as the mesh names.
"""
import base64
import dataclasses
import enum
import fractions
import importlib
import json
import sys

__all__ = ["MAX_TEXT", "MAX_VALUES", "Opaque", "PlainDataError", "TooLarge", "dumps", "from_plain", "json_values_at_most",
           "loads", "loads_json", "to_plain"]

TAG = "__plain__"
MAX_DEPTH = 32              # nesting of the values written (lists in lists ...); read back, a little more
MAX_ITEMS = 200_000         # values written by one to_plain
MAX_BYTES = 16 << 20        # bytes of arrays, tensors and bytes written by one to_plain
MAX_TEXT = 3 * MAX_BYTES    # characters of plain-data text read (base64 and JSON around MAX_BYTES)
MAX_VALUES = 8 * MAX_ITEMS  # JSON values in plain-data text read (each item is at most a few)
LIBRARIES = ("builtins", "numpy", "tensorflow", "tf_keras", "keras", "jax")  # classes read back as themselves
SCALARS = (type(None), bool, int, float, str)
ENUM_MODULES = ("signal", "enum")  # enumerations read back (signal.SIGTERM)
RECORD_MODULES = ("course_utils.profiling",)  # course_utils' dataclasses read back (CollectiveRun)
_TOO_LARGE = {TAG: "object", "type": "too large", "module": "", "callable": False, "class": False}  # over a budget


class PlainDataError(ValueError):
    """Text that is not plain data of this module (too deep, too big, or an unknown kind)."""


class TooLarge(PlainDataError):
    """Text that holds more than the reader takes (characters or values): it was not parsed."""


class Opaque:
    """Stands for a value that does not cross as data (a function, a model, a student's class).

    ``type(value).__name__`` is the original type's name, so feedback can say what was given;
    ``is_callable`` and ``is_class`` say whether it was a function (or callable object) or a class.

    Example:
        >>> value = from_plain(to_plain(lambda: 1))
        >>> type(value).__name__, value.is_callable
        ('function', True)
    """

    is_callable = False
    is_class = False
    module = ""

    def __repr__(self):
        return f"<{type(self).__name__} (not plain data)>"


_OPAQUE_TYPES = {}


def _opaque(name, module, is_callable, is_class):
    key = (str(name).split(".")[-1][:80], str(module)[:80], bool(is_callable), bool(is_class))
    if key not in _OPAQUE_TYPES:
        _OPAQUE_TYPES[key] = type(key[0] or "object", (Opaque,),
                                  {"module": key[1], "is_callable": key[2], "is_class": key[3]})
    return _OPAQUE_TYPES[key]()


def _class_info(cls):
    """Module and qualified name of a class, read through ``type``'s own slots (never the class's code)."""
    module = type.__dict__["__module__"].__get__(cls)
    qualname = type.__dict__["__qualname__"].__get__(cls)
    return (module if type(module) is str else ""), (qualname if type(qualname) is str else "")


def _tensorflow_kinds():
    """The exact TensorFlow types that cross as data, when TensorFlow is loaded (else an empty dict)."""
    if "tensorflow" not in sys.modules:
        return {}
    from tensorflow.python.framework import dtypes, ops, tensor_shape
    from tensorflow.python.ops import resource_variable_ops
    from tensorflow.experimental import dtensor
    from tensorflow.dtensor.python import d_variable

    return {ops.EagerTensor: "tensor", resource_variable_ops.ResourceVariable: "variable",
            d_variable.DVariable: "variable", dtensor.Layout: "layout", dtensor.Mesh: "mesh",
            tensor_shape.TensorShape: "shape", dtypes.DType: "dtype"}


def _array(value):
    import numpy as np

    array = np.array(value, order="C")  # a copy; ascontiguousarray would make a scalar 1-d
    if array.dtype.kind not in "biufcUS":
        raise PlainDataError(f"arrays of dtype {array.dtype} do not cross")
    return {TAG: "ndarray", "dtype": array.dtype.str, "shape": list(array.shape),
            "data": base64.b64encode(array.tobytes()).decode()}


def _tensor(value, budget):
    """A tensor's record (a DTensor's: its layout and one block per device), or the too-large record."""
    from tensorflow.experimental import dtensor

    if dtensor.is_dtensor(value):
        blocks = [block.numpy() for block in dtensor.unpack(value)]
        if _spend(budget, sum(block.nbytes for block in blocks)):
            return _TOO_LARGE
        return {TAG: "dtensor", "layout": dtensor.fetch_layout(value).to_string(), "blocks": list(map(_array, blocks))}
    array = value.numpy()
    return _TOO_LARGE if _spend(budget, array.nbytes) else {TAG: "tensor", "value": _array(array)}


def to_plain(value):
    """``value`` as plain data (JSON-ready dicts, lists, strings and numbers; see the module docstring).

    Never raises because of the value and never calls its own code: what does not cross by its
    exact type becomes an ``{"__plain__": "object", ...}`` record of its type's name.

    Example:
        >>> to_plain((1, "a", [2.5]))
        {'__plain__': 'tuple', 'items': [1, 'a', [2.5]]}
    """
    budget = {"items": MAX_ITEMS, "bytes": MAX_BYTES}
    return _to_plain(value, 0, budget, _tensorflow_kinds())


def _to_plain(value, depth, budget, tf_kinds):
    budget["items"] -= 1
    if depth > MAX_DEPTH or budget["items"] < 0 or budget["bytes"] < 0:
        return _TOO_LARGE
    kind = type(value)
    try:
        if kind in SCALARS:
            if kind is float and value != value:
                return {TAG: "float", "value": "nan"}
            if kind is float and value in (float("inf"), float("-inf")):
                return {TAG: "float", "value": "inf" if value > 0 else "-inf"}
            if kind is int and abs(value) > 10 ** 300:
                return {TAG: "float", "value": "inf" if value > 0 else "-inf"}
            return value
        if value is Ellipsis:
            return {TAG: "ellipsis"}
        if kind is bytes:
            if _spend(budget, len(value)):
                return _TOO_LARGE
            return {TAG: "bytes", "data": base64.b64encode(value).decode()}
        if kind is fractions.Fraction:
            return {TAG: "fraction", "numerator": value.numerator, "denominator": value.denominator}
        if kind in (list, tuple, set, frozenset):
            items = [_to_plain(item, depth + 1, budget, tf_kinds) for item in list.__iter__(list(value))]
            return items if kind is list else {TAG: kind.__name__, "items": items}
        if kind is dict:
            return {TAG: "dict", "items": [[_to_plain(k, depth + 1, budget, tf_kinds),
                                            _to_plain(v, depth + 1, budget, tf_kinds)] for k, v in dict.items(value)]}
        if kind.__module__ == "numpy" and kind.__name__ == "ndarray":
            if _spend(budget, value.nbytes):
                return _TOO_LARGE
            return _array(value)
        if kind.__module__ == "numpy" and kind in _numpy_scalar_types():
            return {TAG: "npscalar", "value": _array(value)}
        if kind in tf_kinds:
            return _tensorflow_to_plain(tf_kinds[kind], value, budget)
        if issubclass(kind, type):
            module, name = _class_info(value)
            return {TAG: "class", "module": module, "name": name}
        module, name = _class_info(kind)
        if module == "builtins" and issubclass(kind, BaseException):
            args = tuple.__iter__(BaseException.__dict__["args"].__get__(value))
            return {TAG: "exception", "name": name, "args": [a for a in args if type(a) in SCALARS][:4]}
        if issubclass(kind, enum.Enum) and module.split(".")[0] in sys.stdlib_module_names:
            return {TAG: "enum", "module": module, "name": name, "member": enum.Enum.__dict__["name"].__get__(value)}
        if module.startswith("course_utils.") and dataclasses.is_dataclass(kind):
            fields = {f.name: object.__getattribute__(value, f.name) for f in dataclasses.fields(kind)}
            return {TAG: "course", "module": module, "name": name,
                    "fields": _to_plain(fields, depth + 1, budget, tf_kinds)}
    except Exception:  # a value that misbehaves on the way out is described, not sent
        pass
    module, name = _class_info(kind)
    return {TAG: "object", "type": name, "module": module, "callable": callable(value),
            "class": issubclass(kind, type)}


def _spend(budget, nbytes):
    """Take ``nbytes`` from the budget of :func:`to_plain`; whether that overdraws it (the value is then not written)."""
    budget["bytes"] -= nbytes
    return budget["bytes"] < 0


def _numpy_scalar_types():
    import numpy as np

    return set(np.sctypeDict.values())


def _tensorflow_to_plain(kind, value, budget):
    if kind == "tensor":
        return _tensor(value, budget)
    if kind == "variable":
        return {TAG: "variable", "dvariable": type(value).__name__ == "DVariable", "name": value.name,
                "value": _tensor(value.read_value(), budget)}
    if kind in ("layout", "mesh"):
        return {TAG: kind, "spec": value.to_string()}
    if kind == "shape":
        return {TAG: "shape", "dims": value.as_list() if value.rank is not None else None}
    return {TAG: "dtype", "name": value.name}


def dumps(value):
    """``value`` as JSON text of plain data (see :func:`to_plain`)."""
    return json.dumps(to_plain(value), allow_nan=False)


def json_values_at_most(text):
    """An upper bound on the number of values in the JSON ``text``, counted in linear time without parsing it.

    Every value but the first follows a comma or a colon, or is the first in a list or an object, so
    there are at most one more than commas, colons, ``[`` and ``{`` (those inside strings count too).

    Example:
        >>> json_values_at_most('{"a": [1, 2, []]}')
        7
    """
    return 1 + sum(text.count(mark) for mark in ",:[{")


def loads_json(text, max_chars, max_values, what="the text"):
    """``json.loads(text)``, refused before parsing when ``text`` could hold more than ``max_values``
    values or has more than ``max_chars`` characters: what the parse may cost is bounded by the caps.

    Raises:
        TooLarge: over a cap (the message names it).
        PlainDataError: not JSON, or nested too deeply for the parser.

    Example:
        >>> loads_json("[[], []]", max_chars=100, max_values=10)
        [[], []]
    """
    if len(text) > max_chars:
        raise TooLarge(f"{what} has more than {max_chars:,} characters")
    if json_values_at_most(text) > max_values:
        raise TooLarge(f"{what} holds more than {max_values:,} JSON values")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise PlainDataError(f"not JSON ({str(err)[:80]})") from None


def loads(text):
    """The value that :func:`dumps` wrote, read back (see :func:`from_plain`), parsed once: text of
    more than :data:`MAX_TEXT` characters or :data:`MAX_VALUES` values is refused unparsed.

    Raises:
        TooLarge: the text is over a cap.
        PlainDataError: the text is not valid JSON of plain data.
    """
    return from_plain(loads_json(text, MAX_TEXT, MAX_VALUES, "the answer data"))


def from_plain(data, depth=0):
    """The value that :func:`to_plain` described (NumPy arrays, tensors, layouts, classes of the course's
    libraries, :class:`Opaque` for the rest).

    Raises:
        PlainDataError: ``data`` is not plain data of this module.

    Example:
        >>> from_plain({"__plain__": "tuple", "items": [1, {"__plain__": "ellipsis"}]})
        (1, Ellipsis)
    """
    if depth > MAX_DEPTH + 2:
        raise PlainDataError("nested too deeply")
    if type(data) in SCALARS:
        return data
    if type(data) is list:
        return [from_plain(item, depth + 1) for item in data]
    if type(data) is not dict or type(data.get(TAG)) is not str:
        raise PlainDataError(f"unexpected {type(data).__name__} in the answer data")
    kind = data[TAG]
    try:
        reader = _READERS[kind]
    except KeyError:
        raise PlainDataError(f"unknown kind {kind!r} in the answer data") from None
    try:
        return reader(data, depth)
    except PlainDataError:
        raise
    except Exception as err:
        raise PlainDataError(f"cannot read a {kind} ({type(err).__name__}: {str(err)[:120]})") from None


def _read_array(data, depth=0):
    import numpy as np

    dtype = np.dtype(data["dtype"])
    if dtype.kind not in "biufcUS":
        raise PlainDataError(f"arrays of dtype {dtype} do not cross")
    shape = tuple(int(n) for n in data["shape"])
    return np.frombuffer(base64.b64decode(data["data"]), dtype=dtype).reshape(shape).copy()


def _library_class(module, name, roots=LIBRARIES):
    """The class ``module.name``, or None. Only a module already loaded in this process is looked in (after
    importing the top-level package of one of ``roots``, a fixed list): the data never chooses what is imported."""
    top = module.split(".")[0]
    if top not in roots:
        return None
    if top in LIBRARIES and top not in sys.modules:
        importlib.import_module(top)
    loaded, parts = sys.modules.get(module), name.split(".")
    value = vars(loaded).get(parts[0]) if loaded is not None else None  # not getattr: no lazy loader runs
    for part in parts[1:]:  # a class defined in a class
        value = vars(value).get(part) if isinstance(value, type) else None
    return value if isinstance(value, type) else None


def _read_class(data, depth=0):
    module, name = str(data["module"]), str(data["name"])
    return _library_class(module, name) or _opaque(name, module, True, True)


def _read_exception(data, depth=0):
    cls = _library_class("builtins", str(data["name"]))
    if cls is None or not issubclass(cls, BaseException):
        raise PlainDataError(f"{data['name']!r} is not a built-in exception")
    return cls(*[arg for arg in data["args"] if type(arg) in SCALARS])


def _read_enum(data, depth=0):
    cls = _library_class(str(data["module"]), str(data["name"]), ENUM_MODULES)
    if cls is None or not issubclass(cls, enum.Enum):
        raise PlainDataError(f"{data['module']}.{data['name']} is not an enumeration of the standard library")
    return cls[str(data["member"])]


def _read_course_record(data, depth):
    if str(data["module"]) in RECORD_MODULES:
        importlib.import_module(str(data["module"]))
    cls = _library_class(str(data["module"]), str(data["name"]), ("course_utils",))
    fields = from_plain(data["fields"], depth + 1)
    if cls is None or not dataclasses.is_dataclass(cls) or type(fields) is not dict:
        raise PlainDataError(f"{data['module']}.{data['name']} is not a record of course_utils")
    return cls(**fields)


def _ensure_devices(mesh_spec):
    """Before TensorFlow starts in this process: as many logical CPUs as the mesh names (the grader's case)."""
    import re

    count = len(set(re.findall(r"device:CPU:\d+", mesh_spec)))
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    if count > 1 and tf.config.get_logical_device_configuration(cpu) is None:
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
        except RuntimeError:
            pass  # the runtime already started: use the devices it has


def _read_layout(spec):
    from tensorflow.experimental import dtensor

    _ensure_devices(spec)
    return dtensor.Layout.from_string(spec)


def _read_tensor(data, depth=0):
    import tensorflow as tf

    return tf.constant(_read_array(data["value"]))


def _read_dtensor(data, depth=0):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    layout = _read_layout(data["layout"])
    blocks = [_read_array(block) for block in data["blocks"]]
    return dtensor.pack([tf.constant(block) for block in blocks], layout)


def _read_variable(data, depth=0):
    import tensorflow as tf

    value = from_plain(data["value"], depth + 1)
    if data.get("dvariable"):
        from tensorflow.experimental import dtensor

        return dtensor.DVariable(value, name=str(data["name"]).split(":")[0])
    return tf.Variable(value, name=str(data["name"]).split(":")[0])


def _read_mesh(data, depth=0):
    from tensorflow.experimental import dtensor

    _ensure_devices(data["spec"])
    return dtensor.Mesh.from_string(data["spec"])


def _items(data, depth):
    if type(data["items"]) is not list:
        raise PlainDataError("items must be a list")
    return [from_plain(item, depth + 1) for item in data["items"]]


def _read_dict(data, depth):
    pairs = _items(data, depth)
    if not all(type(pair) is list and len(pair) == 2 for pair in pairs):
        raise PlainDataError("a dict's items must be pairs")
    return {key: value for key, value in pairs}


def _read_shape(data, depth=0):
    import tensorflow as tf

    return tf.TensorShape(data["dims"])


def _read_dtype(data, depth=0):
    import tensorflow as tf

    return tf.dtypes.as_dtype(str(data["name"]))


_READERS = {
    "ellipsis": lambda data, depth: Ellipsis,
    "float": lambda data, depth: float({"nan": "nan", "inf": "inf", "-inf": "-inf"}[data["value"]]),
    "bytes": lambda data, depth: base64.b64decode(data["data"]),
    "fraction": lambda data, depth: fractions.Fraction(int(data["numerator"]), int(data["denominator"])),
    "tuple": lambda data, depth: tuple(_items(data, depth)),
    "set": lambda data, depth: set(_items(data, depth)),
    "frozenset": lambda data, depth: frozenset(_items(data, depth)),
    "dict": _read_dict,
    "ndarray": _read_array,
    "npscalar": lambda data, depth: _read_array(data["value"])[()],
    "tensor": _read_tensor,
    "dtensor": _read_dtensor,
    "variable": _read_variable,
    "layout": lambda data, depth: _read_layout(data["spec"]),
    "mesh": _read_mesh,
    "shape": _read_shape,
    "dtype": _read_dtype,
    "class": _read_class,
    "exception": _read_exception,
    "enum": _read_enum,
    "course": _read_course_record,
    "object": lambda data, depth: _opaque(data["type"], data["module"], data["callable"], data["class"]),
}
