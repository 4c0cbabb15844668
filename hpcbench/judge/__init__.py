"""What every experiment's rules judge with: the verdict standard and the rule kit.

:mod:`verdict` (a ratio's 95 % interval over launches against a reference band fixed in
advance; Holm), :mod:`rulekit` (strict launch groups, paired comparisons, applicability, one
sentence), :mod:`evidence` (what a rule sees and returns: :class:`~evidence.Evidence`,
:class:`~evidence.Judgement`, :class:`~evidence.LedgerRow`), :mod:`applicability` (the named
platform conditions a claim needs, read alike by its rule and by ``hpcbench doctor``). It sits
below the techniques and the experiments and knows no experiment: the ledger that asks each
experiment's rules is the report's (:mod:`hpcbench.report.ledger`).
"""
