"""Bronze: one streaming table per source; Kafka on Databricks, files locally."""

from cdc_medallion.config import active_conf
from cdc_medallion.layers import bronze

bronze.define(active_conf())
