"""Constants of the Commercial Operations Service specification.

The service and the pipeline are two programs; this package is the only code
they share: enum values, event names, id prefixes, scopes and plans, exactly
as `shared/spec/commercial-operations-api.md` names them.
"""
