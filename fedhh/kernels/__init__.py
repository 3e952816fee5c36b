"""The numeric and random kernels under everything: keyed per-user randomness, sampling,
Bernoulli bits drawn sparsely or a byte at a time, packed bit counts, scratch buffers and the
BLAS thread limit.  They know nothing of items, oracles or protocols."""
