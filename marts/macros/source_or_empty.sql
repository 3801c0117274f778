{#- The warehouse table `name`, or an empty relation of `columns` ({name: DuckDB type}) where the table does
    not exist yet (campaign_engagement before the receiver's first event, the CRM tables before the first
    reconciliation). source() is called either way, so the lineage always names the table. -#}
{% macro source_or_empty(name, columns) %}
  {%- set relation = source('warehouse', name) -%}
  {%- if execute and adapter.get_relation(database=relation.database, schema=relation.schema,
                                          identifier=relation.identifier) is none -%}
    (select {% for column, type in columns.items() %}null::{{ type }} as {{ column }}{{ ", " if not loop.last }}{% endfor %} where false)
  {%- else -%}
    (select {{ columns.keys() | join(', ') }} from {{ relation }})
  {%- endif -%}
{% endmacro %}
