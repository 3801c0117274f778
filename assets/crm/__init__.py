"""CRM reconciliation (issue 11): KOLs in the warehouse against CRM (Salesforce) contacts by email.

normalize (comparison keys as DuckDB macros), reconcile (statuses, result tables), writeback
(the plan of creates/updates and its audit), report (CSV/HTML per run), discrepancies (planted
test data), contacts (the canonical contact columns the CRM resource delivers).
"""
