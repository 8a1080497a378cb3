"""Consumer settings for reading partitions with ``assign()`` without touching any group.

confluent-kafka's Consumer requires a ``group.id``; with ``assign()`` instead of
``subscribe()`` and every commit and offset store disabled the group is never
joined, created or written, which is what "safe to point at production" needs.
"""

NEVER_JOINS = {
    "group.id": "lagwatch-never-joins",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
}
