{#- Dimension type 2 over the nightly KOL snapshots: a row per stretch of unchanged tier, institution,
    engagement level and specialties; archived or gone from the API closes the stretch (closed_reason).

    Incremental: a night reads the snapshots after the last night that opened or closed a row (that one too when
    it was written again since, by a re-run of the day; kol_history_nights), each through its side file of
    changed rows where the lake wrote one against the night before, whole where not, plus each snapshot's ids
    (to see who is gone); it writes only the rows opened or closed since. So a night with 1% of the KOLs changed
    reads and writes about 1% of the rows. The pre-hook first removes the rows opened from the first night read,
    so a snapshot re-written by a second run of the same day is compared again, never counted twice. -#}
{{ config(
    materialized='incremental',
    unique_key=['org', 'kol_id', 'valid_from'],
    incremental_strategy='delete+insert',
    on_schema_change='fail',
    pre_hook="{{ kol_history_reopen_window() }}",
) }}

{%- set plan = kol_history_nights() -%}
{%- set whole = [] -%}
{%- if plan is not none -%}
  {%- for night in plan['nights'] if night['changes'] is none -%}{%- do whole.append(night) -%}{%- endfor -%}
{%- endif -%}

with
{% if plan is not none %}
window_start as (
    {% for org, start in plan['starts'].items() %}
    select '{{ org }}' as org, date '{{ start }}' as start_date {{ 'union all' if not loop.last }}
    {% else %}
    select null::varchar as org, null::date as start_date where false
    {% endfor %}
),

nights as (
    {% for night in plan['nights'] %}
    select '{{ night["org"] }}' as org, date '{{ night["night"] }}' as snapshot_date {{ 'union all' if not loop.last }}
    {% else %}
    select null::varchar as org, null::date as snapshot_date where false
    {% endfor %}
),

-- The window's rows that may differ from the night before: a side file's, or a whole snapshot's.
candidates as (
    select org, kol_id, snapshot_date, tier, institution, engagement_level, specialties, is_archived
    from {{ ref('stg_kol_snapshots') }}
    where {{ kol_history_nights_filter(whole) }}
    {% for night in plan['nights'] if night['changes'] is not none %}
    union all by name
    select '{{ night["org"] }}' as org, id as kol_id, date '{{ night["night"] }}' as snapshot_date, tier, institution,
           engagement_level, specialties, coalesce(is_archived, false) as is_archived
    from read_parquet('{{ night["changes"] | replace("'", "''") }}')
    {% endfor %}
),

present as (
    select org, kol_id, snapshot_date from {{ ref('stg_kol_snapshots') }} where {{ kol_history_nights_filter(plan['nights']) }}
),

-- The KOLs open just before the window (ids only: the state is read for those the window touches).
open_before as (
    select t.org, t.kol_id
    from {{ this }} as t
    join window_start as w using (org)
    where t.valid_from < w.start_date and (t.valid_to is null or t.valid_to >= w.start_date)
),
{% else %}
candidates as (
    select org, kol_id, snapshot_date, tier, institution, engagement_level, specialties, is_archived
    from {{ ref('stg_kol_snapshots') }}
),

present as (
    select org, kol_id, snapshot_date from candidates
),

nights as (
    select distinct org, snapshot_date from present
),

open_before as (
    select null::varchar as org, null::varchar as kol_id where false
),
{% endif %}

-- A KOL that was in the API, absent from a night's snapshot.
gone as (
    select k.org, k.kol_id, n.snapshot_date
    from (select org, kol_id from open_before union select org, kol_id from candidates) as k
    join nights as n using (org)
    anti join present as p using (org, kol_id, snapshot_date)
),

-- Each KOL on each night it may have changed: its tracked state, or NULL with why (archived, gone). The nights
-- between, unchanged, carry the state before them.
states as (
    select
        org, kol_id, snapshot_date,
        case when is_archived then 'archived' else 'changed' end as ending,
        case when not is_archived then
            {'tier': tier, 'institution': institution, 'engagement_level': engagement_level, 'specialties': specialties}
        end as state
    from candidates
    union all
    select org, kol_id, snapshot_date, 'gone' as ending,
           null::struct(tier varchar, institution varchar, engagement_level varchar, specialties varchar[]) as state
    from gone
),

-- The rows that were open just before the window (at most one per KOL) of the KOLs it touches: their closing
-- is decided again.
prior as (
    {% if plan is not none %}
    select t.org, t.kol_id, t.valid_from, t.valid_to, t.closed_reason,
           {'tier': t.tier, 'institution': t.institution, 'engagement_level': t.engagement_level,
            'specialties': t.specialties} as state
    from {{ this }} as t
    join window_start as w using (org)
    semi join (select distinct org, kol_id from states) as touched using (org, kol_id)
    where t.valid_from < w.start_date and (t.valid_to is null or t.valid_to >= w.start_date)
    {% else %}
    select null::varchar as org, null::varchar as kol_id, null::date as valid_from, null::date as valid_to,
           null::varchar as closed_reason,
           {'tier': null::varchar, 'institution': null::varchar, 'engagement_level': null::varchar,
            'specialties': null::varchar[]} as state
    where false
    {% endif %}
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
