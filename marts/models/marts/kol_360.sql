-- One row per organization and KOL: who they are, their detail metrics, their engagement with campaigns
-- (webhook opens and clicks), their CRM status and when a sync last saw them.
with engagement as (
    select
        org,
        kol_id,
        {{ recent_counts('count(*)', 'occurred_at', 'opens', "event = 'campaign.email_opened'") }},
        {{ recent_counts('count(*)', 'occurred_at', 'clicks', "event = 'campaign.link_clicked'") }},
        count(distinct campaign_id) as campaigns_reached,
        max(occurred_at) as last_engagement_at
    from {{ ref('stg_campaign_engagement') }}
    where kol_id is not null
    group by org, kol_id
)

select
    k.org,
    k.kol_id,
    k.full_name,
    k.title,
    k.specialties,
    k.tier,
    k.engagement_level,
    k.institution,
    k.department,
    k.city,
    k.country,
    k.is_archived,
    coalesce(k.bio, d.bio) as bio,
    coalesce(k.notes, d.notes) as notes,
    coalesce(k.social, d.social) as social,
    coalesce(k.research_interests, d.research_interests) as research_interests,
    d.h_index,
    d.publications_count,
    d.total_events,
    d.total_campaigns,
    d.email_open_rate,
    d.response_rate,
    coalesce(e.opens_30d, 0) as opens_30d,
    coalesce(e.clicks_30d, 0) as clicks_30d,
    coalesce(e.opens_90d, 0) as opens_90d,
    coalesce(e.clicks_90d, 0) as clicks_90d,
    coalesce(e.opens_90d, 0) + coalesce(e.clicks_90d, 0) as engagements_90d,
    coalesce(e.campaigns_reached, 0) as campaigns_reached,
    e.last_engagement_at,
    c.crm_status,
    c.crm_contact_id,
    c.crm_match_score,
    c.crm_needs_review,
    c.crm_reconciled_at,
    k.last_seen_at,
    k.last_snapshot_date,
    current_timestamp as as_of
from {{ ref('stg_kols') }} as k
left join {{ ref('stg_kol_details') }} as d using (org, kol_id)
left join engagement as e using (org, kol_id)
left join {{ ref('stg_crm_status') }} as c using (org, kol_id)
