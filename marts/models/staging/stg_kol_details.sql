select
    org,
    id as kol_id,
    bio,
    notes,
    social,
    research_interests,
    metrics.h_index as h_index,
    metrics.publications_count as publications_count,
    metrics.total_events as total_events,
    metrics.total_campaigns as total_campaigns,
    metrics.email_open_rate as email_open_rate,
    metrics.response_rate as response_rate
from {{ source('warehouse', 'kol_details') }}
