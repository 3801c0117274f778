"""A second Commercial Operations API test server, written from the spec alone (nothing from service/).

It differs from `service/` wherever the spec allows: second-precision timestamps from a clock that may be
skewed (the Date header too), no updated_at on campaigns/products/signals, no is_archived in KOL list items,
no total_pages outside the KOL list, ties in created_at. Tests drive it through `SpecServer`:

    server = SpecServer(kols=300, campaigns=20, products=10, signals=50).start()
    server.base_url, server.api_key              # what the sync is given
    server.create_kols(5); server.archive_kols([...]); server.delete("kols", [...])
    server.on_page("/kols", 2, action)           # one-shot: runs right after page 2 of /v1/kols is computed
    server.fail_detail(kol_id, times=2)           # the next 2 GET /v1/kols/{kol_id} answer 400 (that KOL only)
    server.clock_offset = 600                     # the server's clock 10 minutes ahead (Date header included)
    server.truth("kols"), server.archived_kol_ids()
    server.stop()
"""

from tests.spec_server.server import SpecServer
from tests.spec_server.state import RESOURCES, SpecState

__all__ = ["RESOURCES", "SpecServer", "SpecState"]
