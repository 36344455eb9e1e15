"""store/driver_errors.py: driver errors typed once, by type."""

import asyncpg
import pytest

from store.driver_errors import translate_driver_error
from store.errors import DatabaseBusy, DatabaseUnavailable


@pytest.mark.parametrize(
    ("error", "typed"),
    [
        (ConnectionRefusedError(111, "refused"), DatabaseUnavailable),
        (asyncpg.exceptions.InvalidCatalogNameError("no such database"), DatabaseUnavailable),
        (asyncpg.exceptions.ConnectionDoesNotExistError("lost"), DatabaseUnavailable),
        (asyncpg.exceptions.AdminShutdownError("shutdown"), DatabaseUnavailable),
        (asyncpg.exceptions.DeadlockDetectedError("deadlock"), DatabaseBusy),
        (asyncpg.exceptions.SerializationError("serialization"), DatabaseBusy),
        (asyncpg.exceptions.LockNotAvailableError("lock"), DatabaseBusy),
        (asyncpg.exceptions.QueryCanceledError("statement timeout"), DatabaseBusy),
        (asyncpg.exceptions.InvalidCachedStatementError("cached plan"), DatabaseBusy),
        (asyncpg.exceptions.OutdatedSchemaCacheError("type changed"), DatabaseBusy),
    ],
)
def test_translate_driver_error__by_type(error, typed):
    assert type(translate_driver_error(error)) is typed


def test_translate_driver_error__follows_wrapped_causes_and_leaves_others():
    wrapper = RuntimeError("a library's wrapper")
    wrapper.__cause__ = asyncpg.exceptions.InvalidCatalogNameError("x")
    assert isinstance(translate_driver_error(wrapper), DatabaseUnavailable)
    assert translate_driver_error(ValueError("a bug")) is None
    assert translate_driver_error(asyncpg.exceptions.UniqueViolationError("dup")) is None
