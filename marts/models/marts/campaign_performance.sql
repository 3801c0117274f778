-- Volume-weighted rates per organization, campaign type and month (the month, in UTC, the campaign was sent,
-- else created): sums of the counts first, then one division, NULL where the denominator is 0.
with by_month as (
    select
        org,
        campaign_type,
        date_trunc('month', coalesce(sent_at, created_at) at time zone 'UTC')::date as month,
        count(*) as campaigns,
        count(*) filter (where sent > 0) as campaigns_sent,
        sum(sent) as sent,
        sum(delivered) as delivered,
        sum(opened) as opened,
        sum(clicked) as clicked
    from {{ ref('stg_campaigns') }}
    group by all
)

select
    org,
    campaign_type,
    month,
    campaigns,
    campaigns_sent,
    sent,
    delivered,
    opened,
    clicked,
    {{ safe_ratio('delivered', 'sent') }} as delivery_rate,
    {{ safe_ratio('opened', 'delivered') }} as open_rate,
    {{ safe_ratio('clicked', 'delivered') }} as click_rate
from by_month
