-- One row per organization and campaign: its funnel as the API reports it, and the KOLs it reached by webhook.
with reached as (
    select org, campaign_id, count(distinct kol_id) as kols_engaged
    from {{ ref('stg_campaign_engagement') }}
    where kol_id is not null
    group by org, campaign_id
)

select
    c.org,
    c.campaign_id,
    c.name,
    c.campaign_type,
    c.status,
    c.audience_count,
    c.sent,
    c.delivered,
    c.opened,
    c.clicked,
    c.api_open_rate,
    c.api_click_rate,
    {{ safe_ratio('c.delivered', 'c.sent') }} as delivery_rate,
    coalesce(r.kols_engaged, 0) as kols_engaged,
    c.product_ids,
    c.created_at,
    c.sent_at
from {{ ref('stg_campaigns') }} as c
left join reached as r using (org, campaign_id)
