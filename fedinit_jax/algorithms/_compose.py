"""Compose a SAM-family algorithm from an existing correction: same slots, SAM's gradient,
and one more working buffer (the perturbation e) in its declared costs."""
from fedinit_jax.correction import Correction


def with_sam_buffer(correction: Correction) -> Correction:
    """`correction` whose Costs also list SAM's perturbation e as client working memory."""
    costs = correction.costs._replace(client_work=correction.costs.client_work + ("e",))
    return correction._replace(costs=costs)
