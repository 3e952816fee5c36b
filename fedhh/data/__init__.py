"""Populations: items and their public codec, users and shards, the sources a config names
(wordfreq, Zipf, files), the on-disk store written by ``fedhh population build``, and the
checks of user tables."""
