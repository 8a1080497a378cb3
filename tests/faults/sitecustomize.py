"""A test-only fault: with this directory on PYTHONPATH, Python imports this module at start
(``site`` imports ``sitecustomize``). While the file named by LAGWATCH_TEST_SAMPLE_FAULT
exists, ``Sampler.sample`` raises ValueError before doing anything, as a bug or a
synchronous AdminClient argument check would. With LAGWATCH_TEST_HIDE_FIRST_LISTING set to
a group id, the first ListGroups answer of each worker process leaves that group out, as a
coordinator still loading its groups after a restart answers. Only these methods are
wrapped, when exporter.kafka.sampler is first imported: the exporter, its Kafka worker
process and the broker are all real (tests/test_worker.py).
"""

import importlib.abc
import importlib.machinery
import os
import sys

_FLAG = os.environ.get("LAGWATCH_TEST_SAMPLE_FAULT")
_HIDE = os.environ.get("LAGWATCH_TEST_HIDE_FIRST_LISTING")


def _hide_first_listing(module) -> None:  # type: ignore[no-untyped-def]
    real = module.BrokerRequests.list_groups
    listings = []

    def list_groups(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        got, failures = real(self, *args, **kwargs)
        listings.append(1)
        if len(listings) == 1:
            got = {g: lg for g, lg in got.items() if g != _HIDE}
        return got, failures

    module.BrokerRequests.list_groups = list_groups


def _inject(module) -> None:  # type: ignore[no-untyped-def]
    if _HIDE:
        _hide_first_listing(module)
    if not _FLAG:
        return
    real = module.Sampler.sample

    def sample(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.path.exists(_FLAG):
            raise ValueError(f"injected by tests/faults while {_FLAG} exists")
        return real(self, *args, **kwargs)

    module.Sampler.sample = sample


class _Finder(importlib.abc.MetaPathFinder):
    """Finds exporter.kafka.sampler the normal way, then wraps its loader to patch it once loaded."""

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != "exporter.kafka.sampler":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_inject(module):  # type: ignore[no-untyped-def]
            exec_module(module)
            _inject(module)

        spec.loader.exec_module = exec_and_inject  # type: ignore[method-assign]
        return spec


if _FLAG or _HIDE:
    sys.meta_path.insert(0, _Finder())
