select *
from {{ source_or_empty('campaign_engagement', {
    'org': 'varchar', 'event_id': 'varchar', 'event': 'varchar', 'campaign_id': 'varchar', 'kol_id': 'varchar',
    'occurred_at': 'timestamptz'}) }}
