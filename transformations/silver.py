"""Silver: every source parsed into the unified change-event model, under expectations."""

from cdc_medallion.config import active_conf
from cdc_medallion.layers import silver

silver.define(active_conf())
