select
    org,
    id as campaign_id,
    name,
    type as campaign_type,
    status,
    audience_count,
    coalesce(metrics.sent, 0) as sent,
    coalesce(metrics.delivered, 0) as delivered,
    coalesce(metrics.opened, 0) as opened,
    coalesce(metrics.clicked, 0) as clicked,
    metrics.open_rate as api_open_rate,
    metrics.click_rate as api_click_rate,
    products as product_ids,
    created_at,
    sent_at
from {{ source('warehouse', 'campaigns') }}
