{#- kol_history's incremental plan, looked up before the model runs and by its pre-hook (so its SQL names files,
    and DuckDB opens no other): the nights to read, per organization those after the last one that opened or
    closed a row (that one too when its snapshot was written again since: a re-run of the day), each with its
    side file of changed rows (resources/changed_rows.py) where that file was written with the snapshot and
    compared with the night before, else none (the snapshot is read whole); and `starts`, each organization's
    first night to read. None on a full build. -#}
{% macro kol_history_nights() %}
  {% if not execute or not is_incremental() %}{{ return(none) }}{% endif %}
  {% set starts = {} %}
  {% for row in run_query("select org, max(greatest(valid_from, coalesce(valid_to, valid_from)))::varchar from "
                          ~ this ~ " group by org") %}
    {% do starts.update({row[0]: row[1]}) %}
  {% endfor %}
  {% set pattern = "/org=([^/]+)/kols/snapshot_date=([0-9-]+)/(changed/)?data[.]parquet$" %}
  {% set files = run_query(
      "select file, regexp_extract(file, '" ~ pattern ~ "', 1) as org, regexp_extract(file, '" ~ pattern ~ "', 2) as night, "
      ~ "regexp_extract(file, '" ~ pattern ~ "', 3) <> '' as is_changes from ("
      ~ "select file from glob('" ~ var('kol_snapshots') ~ "/data.parquet') union all "
      ~ "select file from glob('" ~ var('kol_snapshots') ~ "/changed/data.parquet')) order by org, night") %}
  {% set ids = {} %}
  {% set paths = [] %}
  {% for row in files %}{% do paths.append("'" ~ row['file'] | replace("'", "''") ~ "'") %}{% endfor %}
  {% if paths %}
    {% for row in run_query("select file_name, key::varchar, value::varchar from parquet_kv_metadata([" ~ paths | join(', ')
                            ~ "]) where key::varchar in ('commops.snapshot_id', 'commops.previous_snapshot_id', 'commops.replaces_snapshot_id')") %}
      {% do ids.update({row[0] ~ '|' ~ row[1]: row[2]}) %}
    {% endfor %}
  {% endif %}
  {% set changes = {} %}
  {% for row in files if row['is_changes'] %}
    {% do changes.update({row['org'] ~ '|' ~ row['night']: row['file']}) %}
  {% endfor %}
  {#- A night's side file stands for it when written with it against the night before's snapshot. -#}
  {% set follows = {} %}
  {% set previous = {} %}
  {% for row in files if not row['is_changes'] %}
    {% set key = row['org'] ~ '|' ~ row['night'] %}
    {% set side = changes.get(key) %}
    {% set before = previous.get(row['org']) %}
    {% set snapshot_id = ids.get(row['file'] ~ '|commops.snapshot_id') %}
    {% do follows.update({key: side is not none and before is not none and snapshot_id is not none
        and ids.get(before ~ '|commops.snapshot_id') is not none
        and ids.get(side ~ '|commops.snapshot_id') == snapshot_id
        and ids.get(side ~ '|commops.previous_snapshot_id') == ids.get(before ~ '|commops.snapshot_id')}) %}
    {#- The night last read, written again since (a re-run compares with the same day's earlier file, and its
        snapshot names the one it replaced), is read again; one written once (following the night before, or the
        first night) is not. -#}
    {% set replaced = ids.get(row['file'] ~ '|commops.replaces_snapshot_id') is not none %}
    {% do follows.update({key ~ '|once': follows[key] or (before is none and side is none and not replaced)}) %}
    {% do previous.update({row['org']: row['file']}) %}
  {% endfor %}
  {% set nights = [] %}
  {% set window = {} %}
  {% for row in files if not row['is_changes'] %}
    {% set key = row['org'] ~ '|' ~ row['night'] %}
    {% set last = starts.get(row['org']) %}
    {% if last is none or row['night'] > last or (row['night'] == last and not follows[key ~ '|once']) %}
      {% if row['org'] not in window %}{% do window.update({row['org']: row['night']}) %}{% endif %}
      {% do nights.append({'org': row['org'], 'night': row['night'], 'changes': changes.get(key) if follows[key] else none}) %}
    {% endif %}
  {% endfor %}
  {{ return({'starts': window, 'nights': nights}) }}
{% endmacro %}

{#- A WHERE condition true on the rows of these `nights` (constants: DuckDB opens only their files). -#}
{% macro kol_history_nights_filter(nights) -%}
  {%- for night in nights %}{{ ' or ' if not loop.first }}(org = '{{ night["org"] }}' and snapshot_date = date '{{ night["night"] }}'){% else %}false{% endfor -%}
{%- endmacro %}
