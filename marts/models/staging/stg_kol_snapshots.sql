-- The tracked columns of every nightly KOL snapshot (kol_history's input).
select
    org,
    id as kol_id,
    snapshot_date,
    tier,
    institution,
    engagement_level,
    specialties,
    coalesce(is_archived, false) as is_archived
from {{ source('warehouse', 'kols_history') }}
