"""One module per import source (see "Adding a source" in :mod:`ownstate.importers`)."""
