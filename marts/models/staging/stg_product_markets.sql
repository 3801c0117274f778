select
    p.org,
    p.id as product_id,
    p.name as product_name,
    p.status as product_status,
    p.regulatory_status,
    entry.key as market,
    entry.value.status as market_status,
    entry.value.clearance_number as clearance_number,
    entry.value.ce_mark as ce_mark,
    p.created_at,
    p.updated_at
from {{ source('warehouse', 'products') }} as p,
     unnest(map_entries(p.market_status)) as markets(entry)
