"""Alerts without Dagster+: what went wrong, told once per incident on the channels an operator set up.

- `settings`: the COMMOPS_ALERT_* channels and thresholds, COMMOPS_DAGSTER_URL for run links;
- `messages`: one alert as one line (and its JSON and email forms), never a secret or personal data;
- `channels`: a Slack incoming webhook, a generic signed JSON webhook, email over SMTP;
- `incidents`: the incident store every process shares (SQLite beside the inbox, or the inbox's Postgres),
  and its outbox of messages owed to each channel;
- `alerter`: opening and resolving incidents, delivering what is owed (a failing channel is retried later,
  never raised);
- `watch`: what is judged: finished runs and their blocking checks, the inbox (quarantined events, an aged
  backlog, a silent receiver), the freshness of each organization's tables.

The Dagster sensors (pipelines/sensors.py) and `commops sync` / `commops status` under cron call the same
`watch` functions on the same store, so an incident is told once whoever sees it first.
"""
