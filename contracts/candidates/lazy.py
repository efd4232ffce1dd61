"""A module's function, imported on its first call: the candidates' routes and gates.

Registering the built-in and engine candidates must not import torch extensions, engines or kernels (the
first hour of a user's session imports the registry only). The stand-in answers ``inspect.signature``
with the real function's, so ``Candidate.covers`` passes a gate exactly the options it takes.
"""

from __future__ import annotations

import importlib
import inspect

__all__ = ["LazyFactory", "LazyFunction"]


class LazyFunction:
    """``module.attr``, looked up when called (or when its signature is asked)."""

    def __init__(self, module: str, attr: str):
        self.module, self.attr = module, attr
        self.__qualname__ = f"{module}.{attr}"

    def target(self):
        return getattr(importlib.import_module(self.module), self.attr)

    def __call__(self, *args, **kwargs):
        return self.target()(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.target())

    def __repr__(self) -> str:
        return f"<lazy {self.__qualname__}>"


class LazyFactory:
    """``module.factory(*args)``, built on the first call and kept: a route made per family (the models' and the
    trainers' routers) that registering must not build."""

    def __init__(self, module: str, factory: str, *args):
        self.module, self.factory, self.args = module, factory, args
        self.__qualname__ = f"{module}.{factory}({', '.join(map(repr, args))})"
        self._built = None

    def __call__(self, *args, **kwargs):
        if self._built is None:
            self._built = getattr(importlib.import_module(self.module), self.factory)(*self.args)
        return self._built(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<lazy {self.__qualname__}>"
