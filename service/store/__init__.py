"""Storage of the service. Every SQL statement of the service lives in this package.

db.py owns connections, the schema and transactions; one module per resource holds
its queries and returns rows in the API's shapes. Replacing SQLite means replacing
this package only.
"""
