select
    s.org,
    s.id as signal_id,
    relevance.product_id,
    relevance.relevance_type,
    s.impact.level as impact_level,
    s.published_at
from {{ source('warehouse', 'signals') }} as s,
     unnest(s.product_relevance) as relevances(relevance)
