{#- `aggregate` (e.g. count(distinct signal_id)) over the rows whose `at` falls in the last `recent_days` and the
    last `longer_days` (dbt_project.yml), and where `condition` (if given) holds: the columns `<name>_30d` and `<name>_90d`. -#}
{% macro recent_counts(aggregate, at, name, condition=none) -%}
  {%- for suffix, days in [('30d', var('recent_days')), ('90d', var('longer_days'))] %}
        {{ aggregate }} filter (where {{ at }} >= current_timestamp - to_days({{ days }}){{ ' and ' ~ condition if condition }}) as {{ name }}_{{ suffix }}{{ ',' if not loop.last }}
  {%- endfor %}
{%- endmacro %}
