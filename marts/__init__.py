"""The analysts' marts: a dbt project (dbt_project.yml, models/, macros/), shipped with the package so the code
location finds it wherever it is installed (assets/marts.py loads it)."""
