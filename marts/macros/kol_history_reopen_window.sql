{#- kol_history's pre-hook (incremental runs): remove the rows opened on or after each organization's
    window start (the last snapshot date that opened or closed a row); the model writes them again. -#}
{% macro kol_history_reopen_window() %}
  {% if is_incremental() %}
    delete from {{ this }} as t
    where t.valid_from >= (
        select max(greatest(w.valid_from, coalesce(w.valid_to, w.valid_from))) from {{ this }} as w where w.org = t.org
    )
  {% endif %}
{% endmacro %}
