"""Client for the Commercial Operations API: paging, one shared rate budget, retries, completeness checks."""

from ._client import ApiClient
from ._paths import item_path
from ._paging import Listing, ListingReport, ListSource, Page, Walk
from ._errors import (
    ApiError,
    ApiUnavailableError,
    AuthenticationError,
    IncompleteDataError,
    NotFoundError,
    RequestBudgetExceeded,
    ScopeError,
)
from ._stats import RequestStats

__all__ = [
    "ApiClient",
    "ApiError",
    "ApiUnavailableError",
    "AuthenticationError",
    "IncompleteDataError",
    "ListSource",
    "Listing",
    "ListingReport",
    "NotFoundError",
    "Page",
    "RequestBudgetExceeded",
    "RequestStats",
    "ScopeError",
    "Walk",
    "item_path",
]
