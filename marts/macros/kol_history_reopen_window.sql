{#- kol_history's pre-hook (incremental runs): remove the rows opened on or after each organization's first
    night to read (kol_history_nights); the model writes them again. -#}
{% macro kol_history_reopen_window() %}
  {% if is_incremental() %}
    {% set plan = kol_history_nights() %}
    delete from {{ this }} as t
    where {% for org, start in plan['starts'].items() %}{{ ' or ' if not loop.first }}(t.org = '{{ org }}' and t.valid_from >= date '{{ start }}'){% else %}false{% endfor %}
  {% endif %}
{% endmacro %}
