-- One row per organization, product and market: its regulatory status there, and the signals that named the
-- product recently (of which high impact: critical or high).
-- A signal that names a product twice (directly and as a competitor) counts once: one row per signal and product
-- first, so the counts below need no DISTINCT (four distinct aggregates cost three times this at 1M signals).
with signal_product as (
    select
        org,
        product_id,
        signal_id,
        any_value(published_at) as published_at,
        bool_or(impact_level in ('critical', 'high')) as high_impact
    from {{ ref('stg_signal_products') }}
    group by org, product_id, signal_id
),

product_signals as (
    select
        org,
        product_id,
        {{ recent_counts('count(*)', 'published_at', 'signals') }},
        {{ recent_counts('count(*)', 'published_at', 'high_impact_signals', 'high_impact') }},
        max(published_at) as last_signal_at
    from signal_product
    group by org, product_id
)

select
    m.org,
    m.product_id,
    m.product_name,
    m.product_status,
    m.market,
    m.market_status,
    m.clearance_number,
    m.ce_mark,
    m.regulatory_status,
    m.created_at,
    m.updated_at,
    coalesce(s.signals_30d, 0) as signals_30d,
    coalesce(s.signals_90d, 0) as signals_90d,
    coalesce(s.high_impact_signals_30d, 0) as high_impact_signals_30d,
    coalesce(s.high_impact_signals_90d, 0) as high_impact_signals_90d,
    s.last_signal_at
from {{ ref('stg_product_markets') }} as m
left join product_signals as s using (org, product_id)
