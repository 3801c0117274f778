"""The organizations' registry (resources/orgs.py) as a Dagster resource, apart from the registry so that the
commands which only read or check the registry do not import Dagster."""

from __future__ import annotations

import dagster as dg

from resources.orgs import DEFAULT_ORG, Org, OrgRegistry, default_org
from resources.settings import API_KEY_ENV, BASE_URL_ENV, SettingsError, not_set


class OrgsResource(dg.ConfigurableResource):
    """The registry as a Dagster resource: the organization a run's partition names, and every organization
    (for the sensors). It holds the default organization's address when one was given explicitly (the
    command line's --base-url; else COMMOPS_BASE_URL, read as the organization is needed) and the variable
    its key is read from."""

    data_dir: str
    url: str | None = None  # COMMOPS_ORGS_URL (Postgres); None: orgs.json in the data directory
    default_base_url: str | None = None
    default_api_key_env: str = API_KEY_ENV

    @property
    def registry(self) -> OrgRegistry:
        return OrgRegistry(self.data_dir, self.url, default=self.default)

    def default(self) -> Org | None:
        """The organization `default` as this resource configures it (`default_org`)."""
        return default_org(self.default_base_url, self.default_api_key_env)

    def all(self) -> list[Org]:
        return self.registry.all()

    def get(self, name: str) -> Org:
        """The organization `name` (a run's partition): registered, or `default` when it is configured;
        dg.Failure naming what to do otherwise."""
        try:
            org = self.registry.find(name)
        except SettingsError as error:
            raise dg.Failure(str(error)) from None
        if org is not None:
            return org
        if name == DEFAULT_ORG:
            raise dg.Failure(str(not_set(BASE_URL_ENV)))
        raise dg.Failure(f"unknown organization {name!r}: register it with commops orgs add {name} --base-url ... "
                         "--api-key-env ... (partitions left from a removed organization cannot run)")
