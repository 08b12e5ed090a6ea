"""How the API's handlers turn what the core and the tuning raise into HTTP answers: an
operation refused, a parameter refused, an operation that answers later (a Deferred)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer

from wiremq.admin.routes import HttpError
from wiremq.config.tuning import SaveFailed, TuningError, UnknownParameter
from wiremq.modules.operations import OperationError


def operation(action: Callable[[], Any]) -> Any:
    """``action()``, an ``OperationError`` answered with its status."""
    try:
        return action()
    except OperationError as error:
        raise HttpError(error.status, error.problem) from None


def tuned(change: Callable[[], Any]) -> Any:
    """``change()`` of parameters: unknown 404, refused 400, config.xml not written 500."""
    try:
        return change()
    except UnknownParameter as error:
        raise HttpError(404, error.problem) from None
    except TuningError as error:
        raise HttpError(400, str(error)) from None
    except SaveFailed as error:
        raise HttpError(500, str(error)) from None


def waiting(
    start: Callable[[Callable[[Any], None], Callable[[Exception], None]], None],
    answer: Callable[[Any], dict[str, Any]],
) -> defer.Deferred[dict[str, Any]]:
    """An operation that calls back when done, as a Deferred of its answer."""
    result: defer.Deferred[dict[str, Any]] = defer.Deferred()

    def failed(error: Exception) -> None:
        if isinstance(error, OperationError):
            error = HttpError(error.status, error.problem)
        elif not isinstance(error, HttpError):
            error = HttpError(500, f"the store failed: {error}")
        result.errback(error)

    def done(value: Any) -> None:
        try:
            answered = answer(value)
        except (HttpError, OperationError) as error:
            failed(error)
            return
        result.callback(answered)

    operation(lambda: start(done, failed))
    return result
