"""What reads the store for people: ``log``, ``show``, ``diff`` and revisions.

``revisions`` resolves what a user types (an id prefix, a function name,
``NAME~N``, a tag); ``inspection`` builds what ``log`` and ``show`` display;
``comparison``, ``node_diff`` and ``result_diff`` build ``diff``; ``miss_check``
says whether a call with a stored evaluation's arguments would hit today.

Reads only: it imports the lower wings and never writes a ref or an object.
"""
