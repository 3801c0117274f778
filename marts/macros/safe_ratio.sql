{#- numerator / denominator as DOUBLE; NULL where the denominator is 0 or NULL (no rate, rather than 0). -#}
{% macro safe_ratio(numerator, denominator) %}
  case when coalesce({{ denominator }}, 0) = 0 then null else ({{ numerator }})::double / ({{ denominator }}) end
{% endmacro %}
