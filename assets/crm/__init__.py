"""CRM reconciliation (issue 11): KOLs in the warehouse against CRM (Salesforce) contacts by email.

normalize (comparison keys as DuckDB macros), reconcile (statuses, result tables), writeback
(the plan of creates/updates and its audit), report (CSV/HTML per run), assets (the Dagster assets).
The contacts planted for the sandbox and the tests live beside the stand-in (salesforce_standin/discrepancies.py).
"""
