"""Gold: per source table, an SCD1 current-state table and an SCD2 history (auto CDC flows)."""

from cdc_medallion.config import active_conf
from cdc_medallion.layers import gold

gold.define(active_conf())
