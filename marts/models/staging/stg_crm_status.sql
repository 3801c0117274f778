-- The KOL's own row of the latest reconciliation (kol_primary: every KOL is counted on exactly one row).
select org, kol_id, status as crm_status, crm_id as crm_contact_id, match_score as crm_match_score,
       needs_review as crm_needs_review, reconciled_at as crm_reconciled_at
from {{ source_or_empty('kol_crm_reconciliation', {
    'org': 'varchar', 'kol_id': 'varchar', 'kol_primary': 'boolean', 'status': 'varchar', 'crm_id': 'varchar',
    'match_score': 'double', 'needs_review': 'boolean', 'reconciled_at': 'timestamptz'}) }}
where kol_primary and kol_id is not null
qualify row_number() over (partition by org, kol_id order by reconciled_at desc) = 1
