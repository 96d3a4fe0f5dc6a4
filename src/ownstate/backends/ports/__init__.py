"""The five storage ports a backend implements; see :mod:`ownstate.backends.base`."""
