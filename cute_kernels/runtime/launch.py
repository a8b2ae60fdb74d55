"""Kernel arguments by name: the order of a kernel's ``@cute.jit __call__`` parameters is read
from its signature, so ops never restate it.

Ops name the values they hand a kernel (``mQ=q, mK=k, ...``, the parameter names of the
kernel's ``__call__``) and get positional tuples back:

* :func:`launch_args` for the compiler: the fake arguments of a :class:`~.compile.Build`, in
  parameter order, with the parameter named ``stream`` filled with TVM-FFI's environment stream
  (:func:`~.bridge.env_stream`). A parameter with a default may be left out (the compiler then
  sees its default), as long as no later parameter is given.
* :meth:`KernelParams.call_args` for the compiled kernel: every parameter but ``stream`` (TVM-FFI
  passes torch's current stream itself). A kernel loaded from the disk cache takes no
  defaults, so a parameter may be left out only if its default is None: ``call_args`` passes
  the None (a kernel variant's optional tensors, e.g. block-sparse attention's lists, need
  not be named by every op).

Kernels are named by class or, on the call path, by ``"module:Class"``: the parameter list is
then read from the module's source (``ast``) unless the module is already imported, so loading
a cached kernel and calling it never imports the DSL (the import alone costs more than a warm
first call may take). ``tests/test_launch.py`` checks both readings agree for every kernel.

A name the kernel does not have, or a parameter without a value, raises a ``TypeError`` that
lists both sides, so a reordered or renamed kernel parameter fails loudly instead of binding a
tensor to the wrong parameter.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import sys
from operator import itemgetter
from pathlib import Path

#: a parameter's default, as ``_parameters`` records it: none, None, or another value
NO_DEFAULT, NONE_DEFAULT, VALUE_DEFAULT = 0, 1, 2

#: The parameter TVM-FFI fills with torch's current stream (``env_stream()`` when compiling).
STREAM = "stream"


class KernelParams:
    """The parameters of one or more kernel classes' ``__call__`` (after ``self``), which must
    agree (an op's kernels on different paths are called the same way). A class is given as
    the class or as ``"module:Class"`` (module docstring)."""

    def __init__(self, *classes: type | str):
        if not classes:
            raise TypeError("KernelParams needs at least one kernel class")
        names = [_class_name(cls) for cls in classes]
        params = [_parameters(cls) for cls in classes]
        for name, p in zip(names[1:], params[1:]):
            if p != params[0]:
                raise TypeError(f"{names[0]}.__call__{_spell(params[0])} and "
                                f"{name}.__call__{_spell(p)} disagree: an op calls all "
                                f"its kernels with one argument list")
        self.owner = " / ".join(names)
        self.names = tuple(name for name, _ in params[0])
        self.has_default = tuple(bool(default) for _, default in params[0])
        self.call_names = tuple(n for n in self.names if n != STREAM)
        # the values of parameters left out (default None), merged under the named ones: one
        # dict merge instead of a loop over the parameters on every launch
        self._none_defaults = {name: None for name, default in params[0]
                               if default == NONE_DEFAULT and name != STREAM}
        self._call_set = frozenset(self.call_names)
        self._get = itemgetter(*self.call_names) if self.call_names else (lambda named: ())

    def fake_args(self, named: dict) -> tuple:
        """The compile-time arguments, in parameter order (see the module docstring)."""
        from .bridge import env_stream

        self._check_known(named)
        values, missing = [], []
        for name, has_default in zip(self.names, self.has_default):
            if name in named:
                if missing:
                    raise TypeError(f"{self.owner}.__call__: {', '.join(missing)} left out "
                                    f"before {name!r}, which is given (only trailing "
                                    f"parameters with defaults may be left out)")
                values.append(named[name])
            elif name == STREAM:
                values.append(env_stream())
            elif has_default:
                missing.append(name)
            else:
                raise self._mismatch(named, f"no value for parameter {name!r}")
        return tuple(values)

    def call_args(self, **named) -> tuple:
        """The compiled kernel's runtime arguments: every parameter but ``stream``, in order
        (those left out must default to None: module docstring)."""
        if STREAM in named:
            raise self._mismatch(named, "runtime calls take every parameter but the stream")
        if len(named) != len(self.call_names):
            merged = {**self._none_defaults, **named}
            if len(merged) != len(self.call_names) or not self._call_set.issuperset(named):
                self._check_known(named)
                required = [n for n in self.call_names if n not in merged]
                raise self._mismatch(named, f"no value for parameter {required[0]!r} (only "
                                            f"parameters whose default is None may be left out)")
            named = merged
        try:
            values = self._get(named)
        except KeyError as err:
            raise self._mismatch(named, f"no value for parameter {err.args[0]!r}") from None
        return values if len(self.call_names) > 1 else (values,)

    def tail(self, leading: tuple[str, ...], **named) -> tuple:
        """The runtime arguments after the ``leading`` parameters, for a launch that passes
        those per call and the rest from a plan: ``kernel(*per_call, *tail)``, with no
        per-call lookup by name. ``leading`` must be the first parameters, in order; the
        rest follows :meth:`call_args`' rules."""
        if self.call_names[:len(leading)] != tuple(leading):
            raise TypeError(f"{self.owner}.__call__ starts with ({', '.join(self.call_names)}"
                            f"); per-call arguments ({', '.join(leading)}) must be its first "
                            f"parameters, in order")
        return self.call_args(**dict.fromkeys(leading), **named)[len(leading):]

    def _check_known(self, named: dict) -> None:
        unknown = [n for n in named if n not in self.names]
        if unknown:
            raise self._mismatch(named, f"unknown argument(s) {', '.join(map(repr, unknown))}")

    def _mismatch(self, named: dict, what: str) -> TypeError:
        return TypeError(f"{self.owner}.__call__ has parameters ({', '.join(self.names)}); the "
                         f"op named ({', '.join(named)}): {what}")


@functools.cache
def kernel_params(*classes: type) -> KernelParams:
    """The (cached) :class:`KernelParams` of ``classes``."""
    return KernelParams(*classes)


def launch_args(kernel, /, **named) -> tuple:
    """The fake arguments of a build of ``kernel`` (a kernel object) from named values, in the
    order of ``type(kernel).__call__``'s parameters; ``stream`` is filled in."""
    return kernel_params(type(kernel)).fake_args(named)


def _class_name(cls: type | str) -> str:
    return cls.rpartition(":")[2] if isinstance(cls, str) else cls.__name__


def _parameters(cls: type | str) -> tuple[tuple[str, bool], ...]:
    """(name, NO_DEFAULT | NONE_DEFAULT | VALUE_DEFAULT) of each parameter of ``cls.__call__``
    after ``self``."""
    if isinstance(cls, str):
        module, _, name = cls.partition(":")
        if module in sys.modules:
            cls = getattr(sys.modules[module], name)
        else:
            return _source_parameters(module, name)
    params = list(inspect.signature(cls.__call__).parameters.values())[1:]
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"{cls.__name__}.__call__: parameter {p.name!r} must be positional")
    return tuple((p.name, NO_DEFAULT if p.default is p.empty else
                  NONE_DEFAULT if p.default is None else VALUE_DEFAULT) for p in params)


def _source_parameters(module: str, name: str) -> tuple[tuple[str, bool], ...]:
    """:func:`_parameters` of class ``name`` of ``module``, read from the source without
    importing the module. ``__call__`` must be defined by the class or a base class of the
    same module, with plain positional parameters (the kernels' are); anything else imports
    the module instead."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise TypeError(f"no module {module!r} (kernel class {name!r})")
    tree = ast.parse(Path(spec.origin).read_text(), spec.origin)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    todo = [name]  # the class, then its bases defined in the same module (method lookup)
    while todo:
        node = classes.get(todo.pop(0))
        if node is None:
            break
        fn = next((f for f in node.body
                   if isinstance(f, ast.FunctionDef) and f.name == "__call__"), None)
        if fn is None:
            todo += [b.id for b in node.bases if isinstance(b, ast.Name)]
            continue
        args = fn.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            break
        positional = args.args[1:]
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        return tuple((a.arg, _default_kind(d)) for a, d in zip(positional, defaults))
    return _parameters(getattr(importlib.import_module(module), name))


def _default_kind(default: ast.expr | None) -> int:
    """NO_DEFAULT for a missing default (None here), NONE_DEFAULT for ``= None``."""
    if default is None:
        return NO_DEFAULT
    none = isinstance(default, ast.Constant) and default.value is None
    return NONE_DEFAULT if none else VALUE_DEFAULT


def _spell(params) -> str:
    return "(" + ", ".join(f"{n}=..." if d else n for n, d in params) + ")"
