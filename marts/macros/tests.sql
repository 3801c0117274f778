{#- One row per combination of `columns` (a composite key: org first). -#}
{% test unique_key(model, columns) %}
select {{ columns | join(', ') }}, count(*) as rows_with_key
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}

{#- Every non-null `column_name` names a row of `to` (`field`) in the same organization. -#}
{% test relationships_in_org(model, column_name, to, field) %}
select child.org, child.{{ column_name }}
from {{ model }} as child
left join {{ to }} as parent on parent.org = child.org and parent.{{ field }} = child.{{ column_name }}
where child.{{ column_name }} is not null and parent.{{ field }} is null
{% endtest %}

{#- At most one row per `partition_by` with `condition` true (kol_history: one current row per KOL). -#}
{% test at_most_one(model, partition_by, condition) %}
select {{ partition_by | join(', ') }}, count(*) as rows_matching
from {{ model }}
where {{ condition }}
group by {{ partition_by | join(', ') }}
having count(*) > 1
{% endtest %}
