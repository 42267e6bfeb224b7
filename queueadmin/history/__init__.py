"""Finished jobs stay findable: a row per job that left ``queue.json``
(:mod:`.records`), written by the leader off the commit path (:mod:`.recorder`)."""
