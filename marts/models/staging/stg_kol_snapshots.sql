-- The tracked columns of every nightly KOL snapshot (kol_history's input). Empty where the warehouse has no
-- kols_history view (a lake on object storage): kol_history then stays as it is, the other marts still build.
select
    org,
    id as kol_id,
    snapshot_date,
    tier,
    institution,
    engagement_level,
    specialties,
    coalesce(is_archived, false) as is_archived
from {{ source_or_empty('kols_history', {
    'org': 'varchar', 'id': 'varchar', 'snapshot_date': 'date', 'tier': 'varchar', 'institution': 'varchar',
    'engagement_level': 'varchar', 'specialties': 'varchar[]', 'is_archived': 'boolean'}) }}
