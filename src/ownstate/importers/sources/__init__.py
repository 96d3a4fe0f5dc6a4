"""One module per import source (see "Adding a source" in :mod:`ownstate.importers`).

It may touch nothing: each source module is imported by name when it is asked for.
"""
