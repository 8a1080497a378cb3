"""The bounded histories of a group's memory (exporter/evaluate/latest.py) keep what a
``collections.deque`` with the same ``maxlen`` keeps, through every operation the memory
makes, and read back the same from pickle and copy."""

from __future__ import annotations

import collections
import copy
import pickle
import random

import pytest

from exporter.evaluate.latest import Latest

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`


def test_a_history_keeps_what_a_bounded_deque_keeps() -> None:
    rng = random.Random(7)
    for maxlen in (1, 3, 8):
        ours, theirs = Latest(range(5), maxlen=maxlen), collections.deque(range(5), maxlen=maxlen)
        for _ in range(400):
            op = rng.randrange(4)
            if op == 0:
                v = rng.random()
                ours.append(v)
                theirs.append(v)
            elif op == 1:
                vs = [rng.random() for _ in range(rng.randrange(12))]
                ours.extend(vs)
                theirs.extend(vs)
            elif op == 2 and theirs:
                assert ours.popleft() == theirs.popleft()
            elif op == 3 and rng.random() < 0.1:
                ours.clear()
                theirs.clear()
            assert list(ours) == list(theirs) and len(ours) <= maxlen


def test_a_history_reads_back_with_its_bound() -> None:
    h = Latest([1.0, 2.0, 3.0], maxlen=3)
    for back in (pickle.loads(pickle.dumps(h)), copy.deepcopy(h), copy.copy(h)):
        assert type(back) is Latest and back == [1.0, 2.0, 3.0] and back.maxlen == 3
        back.append(4.0)
        assert back == [2.0, 3.0, 4.0]
    assert h == [1.0, 2.0, 3.0]
