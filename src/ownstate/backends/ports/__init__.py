"""The five storage ports a backend implements; see :mod:`ownstate.backends.base`.

It may touch nothing: it imports no module.
"""
