"""The torch pieces that ``tito-audit rl`` and ``tito-audit replay --weights`` share: loading a causal LM
(``model``), log-probabilities and gradients of a view of an episode (``gradients``), comparing two gradients
(``gradient_compare``), the sampler's settings (``generation``) and the exact bias of the KL estimators under
it (``kl_bias``). Everything here imports torch: import it only on those commands' paths.
"""
