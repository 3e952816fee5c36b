"""The files of the client project ``fedhh new-client`` writes (:mod:`simulations.new_client`), as they are copied.

``client_app.py`` is a ClientApp written from the message contract alone:
it imports Flower, numpy and the standard library, never fedhh, and is not
imported by fedhh; ``test_client_app.py`` is the project's test of it.
"""
