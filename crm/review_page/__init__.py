"""`commops review`: the page where CRM admins decide and act on the latest reconciliation of each
organization (probable matches, duplicate sets, the write-back plan and its approvals, the audit and undo,
decisions from a spreadsheet, the precision of their decisions).

- settings: COMMOPS_REVIEW_* and who may sign in;
- access: sessions, the launch token, CSRF, the Host check and the security headers;
- data: what the pages read (the published analytics copy, a page at a time);
- app: the Starlette app (routes, templates/, static/);
- server: the checks before serving, and the page in a thread.
"""
