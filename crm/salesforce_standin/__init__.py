"""A Salesforce org on 127.0.0.1 over HTTPS, serving what simple-salesforce 1.12.10 calls for Contacts.

`SalesforceStandIn` (server.py) runs it; store.py holds the data, soql.py parses queries,
app.py is the HTTP surface (SOAP login, REST, Bulk 2.0, sessions and the API request budget).
"""

from crm.salesforce_standin.server import SalesforceStandIn

__all__ = ["SalesforceStandIn"]
