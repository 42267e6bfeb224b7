"""Workers the nodes have seen ask for work, shared through the database
(:mod:`.records`, :mod:`.seen`)."""
