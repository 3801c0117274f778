{#- Dimension type 2 over the nightly KOL snapshots: a row per stretch of unchanged tier, institution,
    engagement level and specialties; archived or gone from the API closes the stretch (closed_reason).

    Incremental: a night reads only the snapshots from the last night that changed something (the window's
    start, per organization) and writes only the rows opened or closed since. The pre-hook first removes the
    rows opened from the window's start, so a snapshot re-written by a second run of the same day is
    compared again, never counted twice. -#}
{{ config(
    materialized='incremental',
    unique_key=['org', 'kol_id', 'valid_from'],
    incremental_strategy='delete+insert',
    on_schema_change='fail',
    pre_hook="{{ kol_history_reopen_window() }}",
) }}

with
{% if is_incremental() %}
window_start as (
    select org, max(greatest(valid_from, coalesce(valid_to, valid_from))) as start_date
    from {{ this }}
    group by org
),
{% endif %}

snapshots as (
    select s.*
    from {{ ref('stg_kol_snapshots') }} as s
    {% if is_incremental() %}
    left join window_start as w using (org)
    where w.start_date is null or s.snapshot_date >= w.start_date
    {% endif %}
),

snapshot_dates as (
    select distinct org, snapshot_date from snapshots
),

-- The rows that were open just before the window (at most one per KOL): their closing is decided again.
prior as (
    {% if is_incremental() %}
    select t.org, t.kol_id, t.valid_from, t.valid_to, t.closed_reason,
           {'tier': t.tier, 'institution': t.institution, 'engagement_level': t.engagement_level,
            'specialties': t.specialties} as state
    from {{ this }} as t
    join window_start as w using (org)
    where t.valid_from < w.start_date and (t.valid_to is null or t.valid_to >= w.start_date)
    {% else %}
    select null::varchar as org, null::varchar as kol_id, null::date as valid_from, null::date as valid_to,
           null::varchar as closed_reason,
           {'tier': null::varchar, 'institution': null::varchar, 'engagement_level': null::varchar,
            'specialties': null::varchar[]} as state
    where false
    {% endif %}
),

window_kols as (
    select org, kol_id from snapshots
    union
    select org, kol_id from prior
),

-- Each KOL on each snapshot of the window: its tracked state, or NULL with why (archived, gone).
states as (
    select
        k.org,
        k.kol_id,
        d.snapshot_date,
        case when s.kol_id is null then 'gone' when s.is_archived then 'archived' else 'changed' end as ending,
        case when s.kol_id is not null and not s.is_archived then
            {'tier': s.tier, 'institution': s.institution, 'engagement_level': s.engagement_level,
             'specialties': s.specialties}
        end as state
    from window_kols as k
    join snapshot_dates as d using (org)
    left join snapshots as s using (org, kol_id, snapshot_date)
),

sequenced as (
    select
        st.*,
        case when row_number() over by_kol = 1 then p.state else lag(st.state) over by_kol end as previous_state
    from states as st
    left join prior as p using (org, kol_id)
    window by_kol as (partition by st.org, st.kol_id order by st.snapshot_date)
),

changes as (
    select
        org, kol_id, snapshot_date, state, ending,
        lead(snapshot_date) over by_kol as next_change,
        lead(ending) over by_kol as next_ending,
        row_number() over by_kol as nth
    from sequenced
    where state is distinct from previous_state
    window by_kol as (partition by org, kol_id order by snapshot_date)
),

opened as (
    select org, kol_id, snapshot_date as valid_from, next_change as valid_to, next_ending as closed_reason, state
    from changes
    where state is not null
),

reclosed as (
    select p.org, p.kol_id, p.valid_from, c.snapshot_date as valid_to, c.ending as closed_reason, p.state
    from prior as p
    left join changes as c on c.org = p.org and c.kol_id = p.kol_id and c.nth = 1
    where c.snapshot_date is distinct from p.valid_to or c.ending is distinct from p.closed_reason
),

rows_written as (
    select * from opened
    union all by name
    select * from reclosed
)

select
    org,
    kol_id,
    state.tier as tier,
    state.institution as institution,
    state.engagement_level as engagement_level,
    state.specialties as specialties,
    valid_from,
    valid_to,
    valid_to is null as is_current,
    closed_reason
from rows_written
