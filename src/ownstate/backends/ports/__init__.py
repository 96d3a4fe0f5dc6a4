"""The storage ports a backend implements (one module each); see :mod:`ownstate.backends.base`.

It may touch nothing: it imports no module.
"""
