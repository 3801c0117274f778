"""CRM reconciliation: KOLs in the warehouse against CRM (Salesforce) contacts.

normalize (comparison keys as DuckDB macros), reconcile (statuses by email, result tables),
features / probable / duplicates (the second pass: probable matches under another email, and
duplicate sets within the CRM), review (an admin's confirm or reject), writeback (the plan of
creates/updates and its audit), report (CSV, merge CSV and HTML per run), assets (the Dagster
assets). The contacts planted for the sandbox and the tests live beside the stand-in
(crm/salesforce_standin/discrepancies.py).
"""
