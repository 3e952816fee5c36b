"""Empirical privacy audits: lower bounds on the ε a mechanism actually spends.

``fedhh audit triehh`` (:mod:`fedhh.audits.triehh`, Monte Carlo over whole
TrieHH runs) and ``fedhh audit ldp`` (:mod:`fedhh.audits.ldp`, exact, through
the oracle layer).  A tool above the protocols and the oracles it audits;
the guarantees it checks come from :mod:`fedhh.privacy`.
"""
